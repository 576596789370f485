// Package client is the Go client SDK of Fibril Go: connections, routing,
// publishing, subscriptions and settlement over the Fibril v1 wire protocol
// (docs/protocol.md says what the broker answers; core/wire has the bytes).
//
// It is deliberately as strict as the upstream Fibril SDKs, so that tests
// built on it catch broker mistakes that would break those SDKs: the
// handshake accepts only the expected reply after HELLO, AUTH and
// RECONCILE_CLIENT (docs/protocol.md#quiet-window); HELLO_OK must carry protocol version 1 and the
// exact compliance marker; replies are correlated by opcode, then request
// id, and an ERROR that answers nothing drops the connection (docs/protocol.md#request-ids); a
// DELIVER beyond prefetch is counted in Stats (PrefetchViolations).
//
// Quick start:
//
//	c, err := client.Dial(ctx, client.Options{Addrs: []string{"127.0.0.1:9876"}})
//	if err != nil { return err }
//	defer c.Close()
//	c.DeclareQueue(ctx, client.QueueSpec{Topic: "orders", Partitions: 4})
//	pub := c.Publisher("orders", client.PublisherOptions{})
//	off, err := pub.PublishConfirmed(ctx, client.Message{Key: []byte("order-42"), Payload: []byte("hi")})
//	err = pub.PublishAsync(ctx, client.Message{Payload: []byte("hey")}, func(off uint64, err error) {
//		// runs once, on the client's callback goroutine
//	})
//	sub, err := c.Subscribe(ctx, "orders", client.SubscribeOptions{Prefetch: 16})
//	d, err := sub.Next(ctx)
//	err = d.Ack(ctx)
//
//	c.DeclareStream(ctx, client.StreamSpec{Topic: "events"})
//	st, err := c.SubscribeStream(ctx, "events", client.StreamOptions{DurableName: "billing"})
//	d, err = st.Next(ctx) // every stream subscription sees every record
//	err = d.Ack(ctx)      // commits the "billing" cursor up to this record
//
// # What the client does for you
//
// Routing follows the topology cache (docs/protocol.md#topology): each partition goes to the
// first owner endpoint of its topology entry that is not tagged private, over a pool of connections
// keyed by host:port; unknown owners use the bootstrap connection. Keys
// pick partitions with FNV-1a (docs/protocol.md#publish). REDIRECTs are followed (at most
// Options.MaxRedirects per operation) and update the cache.
//
// Internal clients that can reach private brokers set
// Options.PreferPrivateEndpoints: where a cluster lists a private owner's
// own endpoints, tagged private after the gateway's
// (routing.expose_private_endpoints, docs/protocol.md#endpoints), the
// partition goes to the first tagged one. When it does not answer (its
// dial fails or times out, after Options.DialTimeout) the operation goes
// to the gateway at once; when its connection dies the client does not
// reconnect to it — its subscriptions subscribe again and its operations
// go through the gateway. Either way the endpoint is avoided for
// Options.PrivateRetryAfter (30s). Requests in flight on a connection that
// died still end with ErrOutcomeUnknown, as anywhere. Without the option
// the client never dials an endpoint tagged private.
//
// Re-sends follow the client column of docs/protocol.md#answers exactly: a request is sent
// again only if it was never written, or after a REDIRECT, a 409 or a 503,
// within the caller's deadline. It is never re-sent after a 504 or after
// its connection died with it in flight; such calls return an error
// matching ErrOutcomeUnknown, and the caller decides.
//
// # Writes
//
// Each connection has one writer goroutine and a bounded buffer
// (Options.WriteBufferSize, 1 MiB by default). Callers append complete
// frames to the buffer; the writer hands everything that accumulated to
// the socket in one Write. An idle writer writes a frame at once; frames
// queued while a Write is in progress go out together in the next one, so
// under load many publishes and acks share a write(2), with no timer and
// no added delay. A full buffer makes callers wait (backpressure); PING,
// PONG and TOPOLOGY_UPDATE_ACK never wait. Frames leave in the order they
// were queued.
//
// A frame that is alone — the only request of its connection awaiting an
// answer, the ACK that settles every delivery the connection holds, or a
// PING, PONG or TOPOLOGY_UPDATE_ACK — is written by the goroutine that
// queued it when the writer is idle and the connection is plaintext TCP
// (on Unix systems): one non-blocking write(2), whatever the socket did
// not take left to the writer. One message at a time (a request and its reply, a delivery and
// its ACK) then costs no hand-off to the writer goroutine, which on a
// loaded machine is a thread wake-up; frames that come in streams
// (fire-and-forget publishes, a window of confirmed ones, ACKs while more
// deliveries are held) still go through the writer and batch. The caller
// never waits on the socket: a full socket buffer means the writer takes
// the frame. Stats reports FramesQueued, WriteCalls, BytesWritten,
// AcksMerged and CallerWrites.
//
// "Written" in the sense of docs/protocol.md#answers means handed to the socket's Write (minus
// the tail of a Write that failed part-way). When a connection dies,
// requests still in the buffer were never written: confirmed publishes
// and other requests among them are re-sent after the reconnect (or fail
// as not written when the deadline does not allow it); the others have an
// unknown outcome. Fire-and-forget frames (unconfirmed publishes, ACK,
// NACK) return once queued and are simply lost with a dying connection:
// unconfirmed publishes are at most once, and an unsettled delivery comes
// back when its lease expires. Close flushes the buffer (for at most 2s)
// before closing the socket.
//
// Delivery.Ack coalesces: an ACK queued right after an ACK for the same
// (topic, partition, group) that is still in the buffer is merged into it
// (one frame, several tags, docs/protocol.md#subscriptions), so a consumer that acks each delivery
// sends few ACK frames under load.
//
// # Publishing without waiting
//
// Publisher.PublishAsync queues a confirmed publish and returns; its
// callback runs exactly once with the offset or the error, with the same
// re-send rules as PublishConfirmed (which is PublishAsync plus a wait).
// There is no goroutine and no timer per publish: the confirm is matched
// on the connection's reader, callbacks run one at a time on a goroutine
// of the Client, and an operation whose context has no deadline is
// bounded by OperationTimeout through a periodic sweep of each
// connection. A window of W publishes in flight is one goroutine and a
// semaphore released by the callback.
//
// Connections send PING every Options.Heartbeat and are declared dead
// after three intervals of silence (docs/protocol.md#heartbeats). A lost connection is
// re-established with the endpoint's resume identity (docs/protocol.md#resume): an owner
// endpoint's is kept per address, the bootstrap endpoint's only for the address it came
// from, so that two endpoints never share one broker session (the broker would send one's
// pushes to the other's connection); only a
// `resumed` outcome keeps earlier deliveries settleable (others return
// ErrStaleDelivery and send nothing). After a reconnect the client sends
// RECONCILE_CLIENT for the endpoint's subscriptions and applies the
// verdicts (docs/protocol.md#reconcile): kept subscriptions are re-keyed to the broker's sub_id;
// the others re-subscribe unless their reason is terminal (docs/protocol.md#reason-codes).
// A manual-ack partition that subscribes again drops what it still buffered
// from the broker-side subscription that ended (the broker delivers it
// again), so the new one starts with its whole prefetch.
//
// # Repartition
//
// A queue's partition count can change in a cluster (docs/repartition.md).
// Publishers are fenced by the partitioning version: a REDIRECT with a newer
// version makes the client read the queue's topology again and route by the
// new count (one TOPOLOGY request serves every publish in flight;
// Stats.Fenced counts them). The client connects to the owners of a queue it
// publishes to, or follows, as soon as the topology lists them, so that a
// grow's new partitions, listed when placed, are reached without a connect
// in the pause at the fence. A queue Subscription made without SubscribeOptions.Partitions
// follows the count (S-126): when the topology cache learns a larger one
// (a TOPOLOGY_UPDATE push, a refresh after a REDIRECT or an owner move, or
// the subscription's own read every Options.TopologyRefresh, 30s by
// default), it subscribes the new partitions. A partition a shrink retired
// ends quietly: its subscription is closed with owner_moved and the topology
// no longer lists it, or its re-subscribe answers 404 with the partition
// past the count; the other partitions keep delivering and Next reports no
// error. A subscription that named its partitions keeps them, and a retired
// one among them ends with an error matching ErrPartitionRetired.
//
// Low level: Conn is a single handshaken connection with Do and Send, for
// tools and protocol tests.
package client
