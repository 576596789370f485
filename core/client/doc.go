// Package client is the Go client SDK of Fibril Go: connections, routing,
// publishing, subscriptions and settlement over the Fibril v1 wire protocol
// (shared/protocol/WIRE_V1.md; §N below points into it).
//
// It is deliberately as strict as the upstream Fibril SDKs, so that tests
// built on it catch broker mistakes that would break those SDKs: the
// handshake accepts only the expected reply after HELLO, AUTH and
// RECONCILE_CLIENT (§8.2); HELLO_OK must carry protocol version 1 and the
// exact compliance marker; replies are correlated by opcode, then request
// id, and an ERROR that answers nothing drops the connection (§2.2); a
// DELIVER beyond prefetch is counted in Stats (PrefetchViolations).
//
// Quick start:
//
//	c, err := client.Dial(ctx, client.Options{Addrs: []string{"127.0.0.1:9876"}})
//	if err != nil { return err }
//	defer c.Close()
//	c.DeclareQueue(ctx, client.QueueSpec{Topic: "orders", Partitions: 4})
//	off, err := c.Publisher("orders", client.PublisherOptions{}).
//		PublishConfirmed(ctx, client.Message{Key: []byte("order-42"), Payload: []byte("hi")})
//	sub, err := c.Subscribe(ctx, "orders", client.SubscribeOptions{Prefetch: 16})
//	d, err := sub.Next(ctx)
//	err = d.Ack(ctx)
//
// # What the client does for you
//
// Routing follows the topology cache (§14.1): each partition goes to the
// first owner endpoint of its topology entry, over a pool of connections
// keyed by host:port; unknown owners use the bootstrap connection. Keys
// pick partitions with FNV-1a (§9.1). REDIRECTs are followed (at most
// Options.MaxRedirects per operation) and update the cache.
//
// Re-sends follow the client column of §7.3 exactly: a request is sent
// again only if it was never written, or after a REDIRECT, a 409 or a 503,
// within the caller's deadline. It is never re-sent after a 504 or after
// its connection died with it in flight; such calls return an error
// matching ErrOutcomeUnknown, and the caller decides.
//
// Connections send PING every Options.Heartbeat and are declared dead
// after three intervals of silence (§8.6). A lost connection is
// re-established with the endpoint's resume identity (§8.4); only a
// `resumed` outcome keeps earlier deliveries settleable (others return
// ErrStaleDelivery and send nothing). After a reconnect the client sends
// RECONCILE_CLIENT for the endpoint's subscriptions and applies the
// verdicts (§16): kept subscriptions are re-keyed to the broker's sub_id;
// the others re-subscribe unless their reason is terminal (§17).
//
// Low level: Conn is a single handshaken connection with Do and Send, for
// tools and protocol tests.
package client
