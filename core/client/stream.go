package client

import (
	"context"
	"time"

	"github.com/fibrilgo/fibril/core/wire"
)

// StreamStart is where an unnamed stream subscription starts (S-73); make
// one with StartLatest, StartEarliest, StartAt, StartBack or StartTime.
type StreamStart = wire.StreamStart

// StartLatest: only records published after the subscribe (the default).
func StartLatest() StreamStart { return StreamStart{Kind: wire.StartLatest} }

// StartEarliest: the oldest retained record.
func StartEarliest() StreamStart { return StreamStart{Kind: wire.StartEarliest} }

// StartAt: that offset, clamped into the retained window.
func StartAt(offset uint64) StreamStart { return StreamStart{Kind: wire.StartOffset, Value: offset} }

// StartBack: n records back from the tail.
func StartBack(n uint64) StreamStart { return StreamStart{Kind: wire.StartNBack, Value: n} }

// StartTime: the first record the broker received at or after t.
func StartTime(t time.Time) StreamStart {
	return StreamStart{Kind: wire.StartByTime, Value: uint64(max(t.UnixMilli(), 0))}
}

// FilterClause is one clause of a stream filter (S-79): the record must
// carry header Key with a value matching Pattern, where each '*' matches
// any run of characters.
type FilterClause = wire.FilterClause

// StreamOptions configure SubscribeStream.
type StreamOptions struct {
	// Partitions to read. nil means every partition of the stream (the
	// count from the topology cache, read from the broker when cold).
	Partitions []uint32
	// DurableName names a broker-side cursor per partition (S-74): a new
	// name starts at the oldest retained record, a known one where its
	// acknowledgements left it, and Start is ignored. "" = unnamed.
	DurableName string
	// Start is where an unnamed subscription starts; the zero value is
	// StartLatest. After a reconnect an unnamed subscription continues
	// after the last record it received.
	Start StreamStart
	// Filter is an AND of header clauses; nil passes everything.
	Filter []FilterClause
	// Prefetch bounds, for a named subscription without AutoAck, how many
	// records the broker sends past the last acknowledgement. 0 means
	// DefaultPrefetch.
	Prefetch uint32
	// AutoAck: the broker commits a named cursor along what it sends;
	// Ack is then unnecessary.
	AutoAck bool
}

// SubscribeStream opens a subscription to a Plexus stream: one
// SUBSCRIBE_STREAM per partition, merged by Next and C, each partition
// supervised like a queue subscription's. Every subscription sees every
// record (fan-out). Delivery.Ack on a named subscription commits its
// cursor to that record (acknowledgements are cumulative); Nack does
// nothing on a stream. Stream subscriptions are not reconciled: after a
// reconnect each partition subscribes again, a named one from its cursor,
// an unnamed one after the last record it received.
func (c *Client) SubscribeStream(ctx context.Context, topic string, opts StreamOptions) (*Subscription, error) {
	so := opts
	return c.subscribe(ctx, topic, SubscribeOptions{Partitions: opts.Partitions, Prefetch: opts.Prefetch, AutoAck: opts.AutoAck}, &so)
}

// streamBody is the SUBSCRIBE_STREAM a partition sends now: an unnamed
// subscription that already received records continues after them.
func (ps *partSub) streamBody() *wire.SubscribeStream {
	s := ps.sub
	o := s.stream
	body := &wire.SubscribeStream{Topic: s.topic, Partition: ps.partition, Start: o.Start, Filter: o.Filter,
		Prefetch: s.prefetch, AutoAck: o.AutoAck}
	if o.DurableName != "" {
		body.DurableName = wire.Some(o.DurableName)
	}
	ps.mu.Lock()
	if next, ok := ps.next, ps.seen; ok && o.DurableName == "" {
		body.Start = StartAt(next)
	}
	ps.mu.Unlock()
	return body
}

// streamCredit reports whether the broker bounds a stream subscription by
// prefetch (a named one without auto-ack); the others rely on the
// connection's backpressure, like an auto-ack queue subscription.
func (s *Subscription) streamCredit() bool {
	return s.stream == nil || (s.stream.DurableName != "" && !s.stream.AutoAck)
}
