package client

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fibrilgo/fibril/core/wire"
)

// Message is what a Publisher sends.
type Message struct {
	// Key picks the partition by FNV-1a (§9.1) and travels as
	// partition_key. nil means no key (round-robin); an empty non-nil
	// slice is the empty key.
	Key []byte
	// Partition, when set, overrides the partition choice.
	Partition *uint32
	// ContentType is MIME text ("" = none); the four §4.3 forms map to
	// their tags, anything else travels as a custom type.
	ContentType string
	Headers     map[string]string
	Payload     []byte
	// TTL is the time to live from broker receipt (0 = queue default).
	// Delayed publishes have no TTL.
	TTL time.Duration
}

// PublisherOptions configure a Publisher.
type PublisherOptions struct {
	Group string // queue namespace ("" = default)
}

// Publisher publishes to one topic (and group). It is safe for concurrent
// use.
type Publisher struct {
	cl    *Client
	topic string
	group wire.Option[string]
	rr    atomic.Uint32
}

// Publisher returns a publisher for topic.
func (c *Client) Publisher(topic string, opts PublisherOptions) *Publisher {
	return &Publisher{cl: c, topic: topic, group: optStr(opts.Group)}
}

// choose picks the partition and the partitioning version to send (§9.1):
// an explicit partition wins; with N unknown or ≤ 1 it is 0; a key hashes
// with FNV-1a mod N; otherwise round-robin.
func (p *Publisher) choose(m *Message) (uint32, uint64) {
	n, version, known := p.cl.topo.count(p.topic, p.group)
	switch {
	case m.Partition != nil:
		return *m.Partition, version
	case !known || n <= 1:
		return 0, version
	case m.Key != nil:
		return wire.PartitionForKey(m.Key, n), version
	}
	return (p.rr.Add(1) - 1) % n, version
}

func contentType(mime string) wire.ContentType {
	switch mime {
	case "":
		return wire.ContentType{}
	case "application/msgpack":
		return wire.ContentType{Tag: wire.ContentMsgPack}
	case "application/json":
		return wire.ContentType{Tag: wire.ContentJSON}
	case "text/plain; charset=utf-8":
		return wire.ContentType{Tag: wire.ContentText}
	}
	return wire.ContentType{Tag: wire.ContentCustom, Custom: mime}
}

func headers(m map[string]string) wire.Headers {
	if len(m) == 0 {
		return nil
	}
	h := make(wire.Headers, 0, len(m))
	for k, v := range m {
		h = append(h, wire.Header{Key: k, Value: v})
	}
	sort.Slice(h, func(i, j int) bool { return h[i].Key < h[j].Key })
	return h
}

// checkHeaders refuses reserved keys locally (§9.7): the broker would
// answer ERROR 400, which for a fire-and-forget publish would arrive
// uncorrelated and drop the connection.
func checkHeaders(m map[string]string) error {
	for k := range m {
		if (strings.HasPrefix(k, "fibril.") && !strings.HasPrefix(k, "fibril.client.")) || strings.HasPrefix(k, "stroma.") {
			return errors.New("fibril client: header " + k + " is reserved")
		}
	}
	return nil
}

// publish builds the body for one attempt. The partition and version are
// re-chosen on every attempt, so a re-send after a REDIRECT with a newer
// partitioning version uses the refreshed count.
func (p *Publisher) build(m *Message, confirm bool, notBefore *time.Time) (*routeKey, wire.Encoder, uint64) {
	part, version := p.choose(m)
	k := &routeKey{topic: p.topic, partition: part, group: p.group}
	var key wire.Option[[]byte]
	if m.Key != nil {
		key = wire.Some(m.Key)
	}
	if notBefore != nil {
		return k, &wire.PublishDelayed{
			Topic: p.topic, Group: p.group, Partition: part, RequireConfirm: confirm,
			NotBefore: uint64(notBefore.UnixMilli()), ContentType: contentType(m.ContentType),
			Headers: headers(m.Headers), PartitionKey: key, PartitioningVersion: version, Payload: m.Payload,
		}, version
	}
	body := &wire.Publish{
		Topic: p.topic, Group: p.group, Partition: part, RequireConfirm: confirm,
		ContentType: contentType(m.ContentType), Headers: headers(m.Headers),
		PartitionKey: key, PartitioningVersion: version, Payload: m.Payload,
	}
	if m.TTL > 0 {
		body.TTLMillis = wire.Some(uint64(max(1, m.TTL.Milliseconds())))
	}
	return k, body, version
}

func (p *Publisher) confirmed(ctx context.Context, m *Message, notBefore *time.Time) (uint64, error) {
	op := wire.OpPublish
	if notBefore != nil {
		op = wire.OpPublishDelayed
	}
	var sentVersion uint64
	spec := opSpec{
		op:       op,
		retry409: true,
		prepare: func() (*routeKey, wire.Encoder) {
			k, body, v := p.build(m, true, notBefore)
			sentVersion = v
			return k, body
		},
		afterRedirect: func(ctx context.Context, r *wire.Redirect) {
			if r.PartitioningVersion > sentVersion {
				// Repartitioned: learn the new count before choosing again.
				p.cl.refreshTopology(ctx, p.topic, p.group)
			}
		},
	}
	f, err := p.cl.roundTrip(ctx, spec)
	if err != nil {
		return 0, err
	}
	var ok wire.PublishOK
	if err := f.Decode(&ok); err != nil {
		p.cl.stats.protocolViolations.Add(1)
		return 0, protocolErrorf("malformed PUBLISH_OK: %v", err)
	}
	return ok.Offset, nil
}

// PublishConfirmed publishes and waits for PUBLISH_OK, returning the
// message's offset in its partition. It follows REDIRECTs and re-sends
// after 409 or 503 within ctx; a 504 or a connection lost with the
// publish in flight returns an error matching ErrOutcomeUnknown (the
// message may or may not be stored, and it is not re-sent).
//
// Reserved headers (§9.7) are left for the broker to refuse (ERROR 400).
func (p *Publisher) PublishConfirmed(ctx context.Context, m Message) (uint64, error) {
	return p.confirmed(ctx, &m, nil)
}

// Publish publishes without confirmation; it returns once the frame is
// written. Broker-side failures are not reported (§7.3). Reserved headers
// (§9.7) are refused locally, since the broker's ERROR 400 would arrive
// uncorrelated and drop the connection.
func (p *Publisher) Publish(ctx context.Context, m Message) error {
	if err := checkHeaders(m.Headers); err != nil {
		return err
	}
	k, body, _ := p.build(&m, false, nil)
	return p.cl.sendFireAndForget(ctx, wire.OpPublish, k, body)
}

// PublishDelayed stores the message now and keeps it undeliverable until
// notBefore (§9.4). With confirm it waits for PUBLISH_OK and returns the
// offset; without, it returns 0 once the frame is written. Delayed
// publishes carry no TTL, so m.TTL must be 0.
func (p *Publisher) PublishDelayed(ctx context.Context, m Message, notBefore time.Time, confirm bool) (uint64, error) {
	if m.TTL != 0 {
		return 0, errors.New("fibril client: PublishDelayed: delayed publishes carry no TTL")
	}
	if confirm {
		return p.confirmed(ctx, &m, &notBefore)
	}
	if err := checkHeaders(m.Headers); err != nil {
		return 0, err
	}
	k, body, _ := p.build(&m, false, &notBefore)
	return 0, p.cl.sendFireAndForget(ctx, wire.OpPublishDelayed, k, body)
}
