package queue

import (
	"math"
	"strings"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/wire"
)

// Publish validates msg, stores it as one storage record and makes it
// deliverable at once (S-143) unless it is delayed (S-38). done is called
// exactly once, on the storage commit goroutine, when the partition's
// fsync policy holds for the record (S-36) or with the error; it must not
// block. A validation error is returned here, and then done is never
// called. msg is not retained.
func (p *Partition) Publish(msg *Message, done func(offset uint64, err error)) error {
	return p.publish(msg, done, false)
}

// PublishDeferred is Publish for a caller that calls CommitIfIdle right
// afterwards, before it waits for anything (a connection's reader that has
// drained its input): the record's commit is not handed to the storage
// committer yet, so that CommitIfIdle can run it on the caller
// (storage.Partition.AppendAsyncDeferred).
func (p *Partition) PublishDeferred(msg *Message, done func(offset uint64, err error)) error {
	return p.publish(msg, done, true)
}

// CommitIfIdle commits the partition's pending records on the calling
// goroutine when no storage committer is busy, and otherwise makes sure
// one takes them (storage.Partition.CommitIfIdle). The commit callbacks —
// the done of every Publish it covers, not only the caller's — run on the
// caller, so it must hold no lock they take: no engine lock, and in the
// session neither Session.mu nor Conn.mu. It reports whether it committed.
func (p *Partition) CommitIfIdle() bool {
	if p.log == nil {
		return false
	}
	return p.log.CommitIfIdle()
}

func (p *Partition) publish(msg *Message, done func(offset uint64, err error), deferCommit bool) error {
	if err := p.brokenErr(); err != nil {
		return err
	}
	if err := refused(&p.m.refuse); err != nil {
		return err
	}
	if limit := p.m.opts.MaxMessageBytes; limit > 0 && len(msg.Payload) > limit {
		return core.Errorf(core.ErrTooLarge, "message payload is %d bytes; this broker accepts at most %d (broker.max_message_bytes)", len(msg.Payload), limit)
	}
	if !msg.ContentType.Tag.Valid() {
		return core.Errorf(core.ErrBadRequest, "unknown content type tag %d", msg.ContentType.Tag)
	}
	ct, headers := normaliseContentType(msg.ContentType, msg.Headers)
	if err := checkReserved(headers); err != nil {
		return err
	}
	r := record{
		ContentType: ct,
		Headers:     headers,
		Published:   msg.Published,
		Received:    msg.Received,
		NotBefore:   msg.NotBefore,
		Payload:     msg.Payload,
	}
	ttl := msg.TTLMillis
	if !ttl.Present {
		ttl = p.q.cfg.Load().defaultTTL
	}
	if v, ok := ttl.Get(); ok {
		r.Deadline = ttlDeadline(msg.Received, v)
	}
	return p.appendFenced(&r, msg.PartitioningVersion, done, deferCommit)
}

// ttlDeadline is received + ttl (S-39), saturating; a deadline is never 0
// (0 means "no TTL" in the record).
func ttlDeadline(received int64, ttl uint64) int64 {
	d := int64(math.MaxInt64)
	if ttl < math.MaxInt64 && received < math.MaxInt64-int64(ttl) {
		d = received + int64(ttl)
	}
	if d == 0 {
		d = -1
	}
	return d
}

// append stores r and registers it. mu is held across AppendAsync: the
// offset order and the engine's registration order must agree, or a
// dispatch could see a record before the engine knows it is delayed.
// Nothing storage calls back into (the done of an AppendAsync) takes mu,
// so blocking in AppendAsync on MaxPendingBytes cannot deadlock.
func (p *Partition) append(r *record, done func(uint64, error), deferCommit bool) error {
	return p.appendFenced(r, fenceNone, done, deferCommit)
}

// appendFenced is append for a producer's message routed by partitioning
// version (fenceNone: not routed, a dead letter).
func (p *Partition) appendFenced(r *record, version uint64, done func(uint64, error), deferCommit bool) error {
	data := r.encode()
	var cb func(uint64, error)
	if done := p.gated(done); done != nil {
		cb = func(off uint64, err error) {
			if err != nil {
				err = p.storageErr("publish", err)
			}
			done(off, err)
		}
	}
	p.mu.Lock()
	if err := p.usableLocked(); err != nil {
		p.mu.Unlock()
		return err
	}
	if err := p.fenceLocked(version); err != nil {
		p.mu.Unlock()
		return err
	}
	if err := p.makeRoomLocked(); err != nil {
		p.finishLocked()
		return err
	}
	var off uint64
	var err error
	if deferCommit {
		off, err = p.log.AppendAsyncDeferred(data, r.Received, cb)
	} else {
		off, err = p.log.AppendAsync(data, r.Received, cb)
	}
	if err != nil {
		p.mu.Unlock()
		return p.storageErr("publish", err)
	}
	p.end = off + 1
	p.noteNewerLocked(version, off)
	p.unsettled++
	p.m.stats.published.Add(1)
	p.counts.published.Add(1)
	if r.Deadline != 0 {
		p.ttl.Push(due{r.Deadline, off})
		p.ttlLive++
	}
	if r.NotBefore != 0 && int64(min(r.NotBefore, math.MaxInt64)) > p.m.nowMs() {
		p.delayLocked(off, int64(min(r.NotBefore, math.MaxInt64)))
	} else {
		p.hotOff, p.hotData = off, data
	}
	if p.creditLocked() {
		p.dispatchLocked()
	}
	p.finishLocked()
	return nil
}

// normaliseContentType applies docs/protocol.md#publish / S-34: every header named
// content-type (any ASCII case) is removed; when the body's tag is 0 the
// tag is derived from the last such header. The input slice is never
// modified: it may alias a frame buffer.
func normaliseContentType(ct wire.ContentType, h wire.Headers) (wire.ContentType, wire.Headers) {
	found := -1
	for i := range h {
		if strings.EqualFold(h[i].Key, "content-type") {
			found = i
		}
	}
	if found < 0 {
		return ct, h
	}
	value := h[found].Value
	out := make(wire.Headers, 0, len(h)-1)
	for _, e := range h {
		if !strings.EqualFold(e.Key, "content-type") {
			out = append(out, e)
		}
	}
	if ct.Tag != wire.ContentNone {
		return ct, out
	}
	first, _, _ := strings.Cut(value, ";")
	switch strings.TrimSpace(first) {
	case "application/msgpack":
		return wire.ContentType{Tag: wire.ContentMsgPack}, out
	case "application/json":
		return wire.ContentType{Tag: wire.ContentJSON}, out
	}
	if value == "text/plain; charset=utf-8" {
		return wire.ContentType{Tag: wire.ContentText}, out
	}
	return wire.ContentType{Tag: wire.ContentCustom, Custom: value}, out
}

// checkReserved applies docs/protocol.md#publish / S-33: keys starting with "fibril." or
// "stroma." belong to the broker, except "fibril.client." keys, which the
// SDKs own. Case-sensitive, after content-type normalisation.
func checkReserved(h wire.Headers) error {
	for _, e := range h {
		if (strings.HasPrefix(e.Key, "fibril.") && !strings.HasPrefix(e.Key, "fibril.client.")) || strings.HasPrefix(e.Key, "stroma.") {
			return core.Errorf(core.ErrBadRequest,
				"header %q is reserved: keys starting with \"fibril.\" or \"stroma.\" are set by the broker (clients may only send \"fibril.client.\" keys)", e.Key)
		}
	}
	return nil
}
