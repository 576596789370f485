package integration

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/wire"
)

// TestPublishConsumeAck: confirmed publishes get dense offsets from 0
// (S-23, S-35); they are delivered in offset order with payload, headers
// and content type intact (S-24, S-34, S-48); after ACK nothing comes back
// (S-57), neither in the same session nor after a graceful restart (S-25).
func TestPublishConsumeAck(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	c := newClient(t, b.Addr)
	const topic, n = "orders", 40
	if pc, err := c.DeclareQueue(ctxT(t, opTimeout), client.QueueSpec{Topic: topic, Partitions: 1}); err != nil || pc != 1 {
		t.Fatalf("declare: count %d, %v", pc, err)
	}
	for i := range n {
		off := publish(t, c, topic, client.Message{
			Payload:     []byte(fmt.Sprintf("order-%d", i)),
			Headers:     map[string]string{"x-seq": strconv.Itoa(i)},
			ContentType: "application/json",
		})
		if off != uint64(i) {
			t.Fatalf("publish %d: offset %d, want %d (dense from 0, S-23)", i, off, i)
		}
	}
	sub := subscribe(t, c, topic, client.SubscribeOptions{Prefetch: 8})
	for i := range n {
		d := next(t, sub, waitTimeout)
		if d.Offset != uint64(i) || string(d.Payload) != fmt.Sprintf("order-%d", i) {
			t.Fatalf("delivery %d: offset %d payload %q", i, d.Offset, d.Payload)
		}
		if d.Headers["x-seq"] != strconv.Itoa(i) || d.ContentType != "application/json" || d.Retries != 0 {
			t.Fatalf("delivery %d: headers %v content type %q retries %d", i, d.Headers, d.ContentType, d.Retries)
		}
		if _, ok := d.Headers[client.RetriesHeader]; ok {
			t.Fatalf("first delivery carries %s (S-49: absent when zero)", client.RetriesHeader)
		}
		ack(t, d)
	}
	barrier(t, c)
	// Nothing acknowledged is pending: the next delivery is the next
	// message published.
	if off := publish(t, c, topic, client.Message{Payload: []byte("sentinel-1")}); off != n {
		t.Fatalf("sentinel offset %d, want %d", off, n)
	}
	if d := next(t, sub, waitTimeout); d.Offset != n || string(d.Payload) != "sentinel-1" {
		t.Fatalf("after acks got offset %d %q, want the sentinel at %d", d.Offset, d.Payload, n)
	} else {
		ack(t, d)
	}
	barrier(t, c)
	c.Close()

	b.stop()
	b2 := b.restart()
	c2 := newClient(t, b2.Addr)
	sub2 := subscribe(t, c2, topic, client.SubscribeOptions{Prefetch: 8})
	if off := publish(t, c2, topic, client.Message{Payload: []byte("sentinel-2")}); off != n+1 {
		t.Fatalf("after restart: sentinel offset %d, want %d", off, n+1)
	}
	// Every earlier offset was acknowledged before the restart: the first
	// delivery after it must be the new message (S-25: acked messages
	// never return).
	if d := next(t, sub2, waitTimeout); d.Offset != n+1 || string(d.Payload) != "sentinel-2" {
		t.Fatalf("after restart: first delivery offset %d %q, want only the new message at %d", d.Offset, d.Payload, n+1)
	} else {
		ack(t, d)
	}
	expectNone(t, sub2, 300*time.Millisecond)
}

// TestRedeliveryAfterRetry: NACK with requeue (Retry) makes the message
// deliverable again at once, with fibril.retries counting the retries
// (S-49, S-58, docs/protocol.md#publish, docs/protocol.md#subscriptions).
func TestRedeliveryAfterRetry(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	c := newClient(t, b.Addr)
	const topic = "retry"
	off := publish(t, c, topic, client.Message{Payload: []byte("again"), Headers: map[string]string{"h": "v"}})
	sub := subscribe(t, c, topic, client.SubscribeOptions{Prefetch: 1})
	for want := range 3 {
		d := next(t, sub, waitTimeout)
		if d.Offset != off || string(d.Payload) != "again" || d.Headers["h"] != "v" {
			t.Fatalf("delivery %d: offset %d payload %q headers %v", want, d.Offset, d.Payload, d.Headers)
		}
		h, present := d.Headers[client.RetriesHeader]
		switch {
		case want == 0 && present:
			t.Fatalf("first delivery carries %s=%q", client.RetriesHeader, h)
		case want > 0 && h != strconv.Itoa(want):
			t.Fatalf("delivery after %d retries: %s=%q (present %v)", want, client.RetriesHeader, h, present)
		}
		if d.Retries != want {
			t.Fatalf("delivery %d: Retries %d", want, d.Retries)
		}
		if want < 2 {
			if err := d.Retry(ctxT(t, opTimeout), 0); err != nil {
				t.Fatalf("retry: %v", err)
			}
			continue
		}
		ack(t, d)
	}
	barrier(t, c)
	next2 := publish(t, c, topic, client.Message{Payload: []byte("sentinel")})
	if d := next(t, sub, waitTimeout); d.Offset != next2 {
		t.Fatalf("after ack got offset %d %q, want the sentinel %d", d.Offset, d.Payload, next2)
	}
}

// TestRedeliveryAfterSessionEnd: a lease held by a session returns to
// Ready when the session ends — at once with reconnect grace 0, and only
// when the grace expires otherwise (S-54, S-56, S-102, S-103) — and goes
// to the competing consumer (S-47).
func TestRedeliveryAfterSessionEnd(t *testing.T) {
	t.Parallel()
	for _, grace := range []time.Duration{0, 2500 * time.Millisecond} {
		t.Run(fmt.Sprintf("grace=%v", grace), func(t *testing.T) {
			b := startBroker(t, fmt.Sprintf("--runtime_seed.connection.reconnect_grace_ms=%d", grace.Milliseconds()))
			const topic = "handover"
			pub := newClient(t, b.Addr)
			a := newClient(t, b.Addr)
			subA := subscribe(t, a, topic, client.SubscribeOptions{Prefetch: 1})
			off := publish(t, pub, topic, client.Message{Payload: []byte("held")})
			d := next(t, subA, waitTimeout)
			if d.Offset != off {
				t.Fatalf("A got offset %d, want %d", d.Offset, off)
			}
			bc := newClient(t, b.Addr)
			subB := subscribe(t, bc, topic, client.SubscribeOptions{Prefetch: 1})
			// A holds the only message unsettled: B gets nothing (S-47).
			expectNone(t, subB, 300*time.Millisecond)

			closed := time.Now()
			a.Close() // no bye op in v1: the broker sees the socket end (S-55)
			if grace > 0 {
				// Dormant: the lease is kept while the grace runs (S-56).
				expectNone(t, subB, grace/2)
			}
			d2 := next(t, subB, grace+waitTimeout)
			if waited := time.Since(closed); waited < grace {
				t.Fatalf("redelivered %v after the session's socket closed, before the %v grace expired", waited, grace)
			}
			if d2.Offset != off || string(d2.Payload) != "held" {
				t.Fatalf("B got offset %d %q, want %d held", d2.Offset, d2.Payload, off)
			}
			// A released lease is not a retry (S-49 counts NACK retries only).
			if d2.Retries != 0 {
				t.Fatalf("redelivery after a session end carries %s=%q", client.RetriesHeader, d2.Headers[client.RetriesHeader])
			}
			ack(t, d2)
			barrier(t, bc)
			expectNone(t, subB, 300*time.Millisecond)
		})
	}
}

// TestDelayedDelivery: PUBLISH_DELAYED is confirmed at once but not
// delivered before not_before (S-38, docs/protocol.md#publish); Retry with a delay holds
// the message until its not_before (S-58, docs/protocol.md#subscriptions). Later messages are
// not held up behind a delayed one.
func TestDelayedDelivery(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	c := newClient(t, b.Addr)
	const delay = 1500 * time.Millisecond

	t.Run("PublishDelayed", func(t *testing.T) {
		const topic = "delayed"
		sub := subscribe(t, c, topic, client.SubscribeOptions{Prefetch: 4})
		notBefore := time.Now().Add(delay)
		nbMs := notBefore.UnixMilli()
		offD, err := c.Publisher(topic, client.PublisherOptions{}).PublishDelayed(ctxT(t, opTimeout),
			client.Message{Payload: []byte("later")}, notBefore, true)
		if err != nil {
			t.Fatalf("publish delayed: %v", err)
		}
		offN := publish(t, c, topic, client.Message{Payload: []byte("now")})
		// Both arrive, the undelayed one first (it is not held up behind the
		// delayed one), the delayed one not before not_before.
		for i, want := range []uint64{offN, offD} {
			d := next(t, sub, delay+waitTimeout)
			if d.Offset == offD {
				if got := time.Now().UnixMilli(); got < nbMs {
					t.Fatalf("delayed message delivered at %d ms, before its not_before %d ms", got, nbMs)
				}
				if string(d.Payload) != "later" {
					t.Fatalf("delayed delivery payload %q", d.Payload)
				}
			}
			if d.Offset != want && time.Now().UnixMilli() < nbMs+500 {
				// (Only a machine stalled past not_before may see the order swapped.)
				t.Fatalf("delivery %d: offset %d %q, want %d", i, d.Offset, d.Payload, want)
			}
			ack(t, d)
		}
		expectNone(t, sub, 200*time.Millisecond)
	})

	t.Run("RetryAfter", func(t *testing.T) {
		const topic = "retry-after"
		sub := subscribe(t, c, topic, client.SubscribeOptions{Prefetch: 4})
		off := publish(t, c, topic, client.Message{Payload: []byte("again-later")})
		d := next(t, sub, waitTimeout)
		// The client computes not_before = now + delay (docs/protocol.md#subscriptions), so it
		// is at least this:
		earliest := time.Now().Add(delay).UnixMilli()
		if err := d.Retry(ctxT(t, opTimeout), delay); err != nil {
			t.Fatalf("retry: %v", err)
		}
		offN := publish(t, c, topic, client.Message{Payload: []byte("meanwhile")})
		for i, want := range []uint64{offN, off} {
			d := next(t, sub, delay+waitTimeout)
			if d.Offset == off {
				if got := time.Now().UnixMilli(); got < earliest {
					t.Fatalf("retried message delivered at %d ms, before its not_before %d ms", got, earliest)
				}
				if d.Retries != 1 || d.Headers[client.RetriesHeader] != "1" {
					t.Fatalf("retried delivery: retries %d headers %v", d.Retries, d.Headers)
				}
			}
			if d.Offset != want && time.Now().UnixMilli() < earliest+500 {
				t.Fatalf("delivery %d: offset %d %q, want %d", i, d.Offset, d.Payload, want)
			}
			ack(t, d)
		}
		expectNone(t, sub, 200*time.Millisecond)
	})
}

// TestDeadLetters: a queue with a named DLQ and max_retries = 2 dead-letters
// a message whose retry count already equals 2 on the next Retry
// (retries_exhausted, S-60), a Fail at once (terminal_nack, S-58), and a
// Ready message whose TTL passed (expired, S-39, S-40) — per-message TTL
// and the queue's default TTL alike. The dead letter keeps payload,
// content type and user headers and gets the stroma.dlq.* headers (S-66);
// the DLQ is an ordinary queue (S-67).
func TestDeadLetters(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	c := newClient(t, b.Addr)
	ctx := ctxT(t, opTimeout)
	const dlq, work, workGroup, ttlQ = "dead-letters", "work", "billing", "perishable"
	dlqPolicy := &client.DLQPolicy{Kind: wire.DLQNamed, Topic: dlq}
	for _, spec := range []client.QueueSpec{
		{Topic: dlq},
		{Topic: work, Group: workGroup, DLQ: dlqPolicy, MaxRetries: u32(2)},
		{Topic: ttlQ, DLQ: dlqPolicy, MaxRetries: u32(2), DefaultTTL: 400 * time.Millisecond},
	} {
		if _, err := c.DeclareQueue(ctx, spec); err != nil {
			t.Fatalf("declare %s: %v", spec.Topic, err)
		}
	}
	start := time.Now().UnixMilli()
	wp := c.Publisher(work, client.PublisherOptions{Group: workGroup})
	userHeaders := map[string]string{"x-user": "ada"}
	offExhausted, err := wp.PublishConfirmed(ctx, client.Message{Payload: []byte("exhaust me"), Headers: userHeaders, ContentType: "application/json"})
	if err != nil {
		t.Fatal(err)
	}
	offFailed, err := wp.PublishConfirmed(ctx, client.Message{Payload: []byte("fail me"), ContentType: "text/csv"})
	if err != nil {
		t.Fatal(err)
	}
	offTTL := publish(t, c, ttlQ, client.Message{Payload: []byte("ttl 200ms"), Headers: userHeaders, TTL: 200 * time.Millisecond})
	offDefaultTTL := publish(t, c, ttlQ, client.Message{Payload: []byte("queue default ttl")})

	sub := subscribe(t, c, work, client.SubscribeOptions{Group: workGroup, Prefetch: 1})
	for retries := 0; retries <= 2; retries++ {
		d := next(t, sub, waitTimeout)
		if d.Offset != offExhausted || d.Retries != retries {
			t.Fatalf("work delivery: offset %d retries %d, want %d retries %d", d.Offset, d.Retries, offExhausted, retries)
		}
		if err := d.Retry(ctx, 0); err != nil { // the third one dead-letters
			t.Fatal(err)
		}
	}
	d := next(t, sub, waitTimeout)
	if d.Offset != offFailed || d.Retries != 0 {
		t.Fatalf("work delivery: offset %d retries %d, want %d (the exhausted one is gone)", d.Offset, d.Retries, offFailed)
	}
	if err := d.Fail(ctx); err != nil {
		t.Fatal(err)
	}
	barrier(t, c)
	expectNone(t, sub, 300*time.Millisecond)

	type want struct {
		topic, group, reason, retries, payload, ct string
		off                                        uint64
		user                                       bool
	}
	wants := map[string]want{
		"exhaust me":        {work, workGroup, "retries_exhausted", "2", "exhaust me", "application/json", offExhausted, true},
		"fail me":           {work, workGroup, "terminal_nack", "0", "fail me", "text/csv", offFailed, false},
		"ttl 200ms":         {ttlQ, "", "expired", "0", "ttl 200ms", "", offTTL, true},
		"queue default ttl": {ttlQ, "", "expired", "0", "queue default ttl", "", offDefaultTTL, false},
	}
	dsub := subscribe(t, c, dlq, client.SubscribeOptions{Prefetch: 8})
	for range len(wants) {
		d := next(t, dsub, waitTimeout)
		w, ok := wants[string(d.Payload)]
		if !ok {
			t.Fatalf("unexpected dead letter %q (headers %v)", d.Payload, d.Headers)
		}
		delete(wants, string(d.Payload))
		h := d.Headers
		check := func(k, v string) {
			t.Helper()
			if got, ok := h[k]; !ok || got != v {
				t.Errorf("dead letter %q: %s = %q (present %v), want %q", d.Payload, k, got, ok, v)
			}
		}
		check("stroma.dlq.source_topic", w.topic)
		check("stroma.dlq.source_offset", strconv.FormatUint(w.off, 10))
		check("stroma.dlq.retry_count", w.retries)
		check("stroma.dlq.reason", w.reason)
		if w.group != "" {
			check("stroma.dlq.source_group", w.group)
		} else if g, ok := h["stroma.dlq.source_group"]; ok {
			t.Errorf("dead letter %q: stroma.dlq.source_group = %q for a source without a group", d.Payload, g)
		}
		at, err := strconv.ParseInt(h["stroma.dlq.dead_lettered_at_ms"], 10, 64)
		if err != nil || at < start || at > time.Now().UnixMilli() {
			t.Errorf("dead letter %q: stroma.dlq.dead_lettered_at_ms = %q, want a time in [%d, now]", d.Payload, h["stroma.dlq.dead_lettered_at_ms"], start)
		}
		if d.ContentType != w.ct {
			t.Errorf("dead letter %q: content type %q, want %q", d.Payload, d.ContentType, w.ct)
		}
		if got := h["x-user"]; w.user && got != "ada" {
			t.Errorf("dead letter %q: user header x-user = %q, want ada", d.Payload, got)
		}
		if d.Retries != 0 {
			t.Errorf("dead letter %q: first delivery from the DLQ has retries %d", d.Payload, d.Retries)
		}
		ack(t, d)
	}
	if len(wants) != 0 {
		t.Fatalf("missing dead letters: %v", wants)
	}
	expectNone(t, dsub, 300*time.Millisecond)
}

// TestDelaysSurviveRestart: a delayed publish (S-38: "its delay survives
// restart") and a delayed retry (S-58; its retry count too, S-25) are not
// delivered before their not_before after the broker restarts — after a
// graceful stop and after SIGKILL. The PUBLISH_DELAYED was confirmed and
// the NACK was read before the stop (barrier).
func TestDelaysSurviveRestart(t *testing.T) {
	t.Parallel()
	const delay = 3 * time.Second
	for _, crash := range []bool{false, true} {
		t.Run(map[bool]string{false: "graceful", true: "SIGKILL"}[crash], func(t *testing.T) {
			t.Parallel()
			b := startBroker(t)
			c := newClient(t, b.Addr)
			const topic = "patience"
			offR := publish(t, c, topic, client.Message{Payload: []byte("retry me later")})
			sub := subscribe(t, c, topic, client.SubscribeOptions{Prefetch: 1})
			d := next(t, sub, waitTimeout)
			earliestR := time.Now().Add(delay).UnixMilli()
			if err := d.Retry(ctxT(t, opTimeout), delay); err != nil {
				t.Fatal(err)
			}
			nbD := time.Now().Add(delay)
			offD, err := c.Publisher(topic, client.PublisherOptions{}).PublishDelayed(ctxT(t, opTimeout),
				client.Message{Payload: []byte("deliver me later")}, nbD, true)
			if err != nil {
				t.Fatal(err)
			}
			barrier(t, c)
			c.Close()
			if crash {
				b.kill()
			} else {
				b.stop()
			}
			b2 := b.restart()
			c2 := newClient(t, b2.Addr)
			sub2 := subscribe(t, c2, topic, client.SubscribeOptions{Prefetch: 2})
			got := map[uint64]bool{}
			for range 2 {
				d := next(t, sub2, delay+waitTimeout)
				now := time.Now().UnixMilli()
				switch d.Offset {
				case offR:
					if now < earliestR {
						t.Errorf("retried message delivered at %d ms after the restart, before its not_before %d ms", now, earliestR)
					}
					if d.Retries != 1 {
						t.Errorf("retried message after the restart: retries %d, want 1", d.Retries)
					}
				case offD:
					if now < nbD.UnixMilli() {
						t.Errorf("delayed message delivered at %d ms after the restart, before its not_before %d ms", now, nbD.UnixMilli())
					}
				default:
					t.Fatalf("unexpected delivery offset %d %q", d.Offset, d.Payload)
				}
				if got[d.Offset] {
					t.Fatalf("offset %d delivered twice", d.Offset)
				}
				got[d.Offset] = true
				ack(t, d)
			}
		})
	}
}

// TestTTLNotWhileInflight: a message whose TTL passes while it is
// delivered and unsettled is not removed (S-40: only while Ready); acked,
// it is gone for good. One that comes back to Ready with its TTL passed
// (Retry) is not delivered again but dead-lettered with reason expired
// (S-40, S-66).
func TestTTLNotWhileInflight(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	c := newClient(t, b.Addr)
	ctx := ctxT(t, opTimeout)
	const dlq, src = "expired-letters", "short-lived"
	if _, err := c.DeclareQueue(ctx, client.QueueSpec{Topic: dlq}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeclareQueue(ctx, client.QueueSpec{Topic: src, DLQ: &client.DLQPolicy{Kind: wire.DLQNamed, Topic: dlq}}); err != nil {
		t.Fatal(err)
	}
	const ttl = 300 * time.Millisecond
	dsub := subscribe(t, c, dlq, client.SubscribeOptions{Prefetch: 4})
	sub := subscribe(t, c, src, client.SubscribeOptions{Prefetch: 1})

	off1 := publish(t, c, src, client.Message{Payload: []byte("acked late"), TTL: ttl})
	d := next(t, sub, waitTimeout)
	if d.Offset != off1 {
		t.Fatalf("delivery offset %d, want %d", d.Offset, off1)
	}
	expectNone(t, dsub, 3*ttl) // held past its TTL: not dead-lettered
	ack(t, d)
	barrier(t, c)

	off2 := publish(t, c, src, client.Message{Payload: []byte("retried late"), TTL: ttl})
	d = next(t, sub, waitTimeout)
	if d.Offset != off2 {
		t.Fatalf("delivery offset %d, want %d", d.Offset, off2)
	}
	expectNone(t, dsub, 3*ttl)
	if err := d.Retry(ctx, 0); err != nil {
		t.Fatal(err)
	}
	dl := next(t, dsub, waitTimeout)
	if string(dl.Payload) != "retried late" || dl.Headers["stroma.dlq.reason"] != "expired" ||
		dl.Headers["stroma.dlq.source_offset"] != strconv.FormatUint(off2, 10) {
		t.Fatalf("dead letter %q headers %v, want the retried message with reason expired", dl.Payload, dl.Headers)
	}
	ack(t, dl)
	barrier(t, c)
	expectNone(t, sub, 300*time.Millisecond) // never delivered again
	expectNone(t, dsub, 100*time.Millisecond)
}

// TestPrefetchBound: a manual-ack subscription never has more than
// prefetch deliveries unsettled (S-46, docs/protocol.md#subscriptions); settling one frees
// exactly one credit. Over raw frames: SUBSCRIBE_OK precedes the first
// DELIVER (docs/protocol.md#answers), prefetch 0 is echoed as 0 and treated as 1, and an
// ACK echoes the DELIVER's request id (docs/protocol.md#request-ids, docs/protocol.md#subscriptions).
func TestPrefetchBound(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	c := newClient(t, b.Addr)

	t.Run("client", func(t *testing.T) {
		const topic = "bounded"
		for i := range 10 {
			publish(t, c, topic, client.Message{Payload: []byte(strconv.Itoa(i))})
		}
		sub := subscribe(t, c, topic, client.SubscribeOptions{Prefetch: 3})
		var held []*client.Delivery
		for range 3 {
			held = append(held, next(t, sub, waitTimeout))
		}
		expectNone(t, sub, 300*time.Millisecond) // 3 unsettled: no fourth
		ack(t, held[0])
		if d := next(t, sub, waitTimeout); d.Offset != 3 {
			t.Fatalf("after one ack: offset %d, want 3", d.Offset)
		}
		expectNone(t, sub, 300*time.Millisecond) // exactly one credit came back
		if s := c.Stats(); s.PrefetchViolations != 0 {
			t.Fatalf("prefetch violations: %d", s.PrefetchViolations)
		}
	})

	t.Run("raw prefetch 0", func(t *testing.T) {
		const topic = "bounded-raw"
		for i := range 3 {
			publish(t, c, topic, client.Message{Payload: []byte(strconv.Itoa(i))})
		}
		r := dialRaw(t, b.Addr)
		r.login()
		r.send(wire.OpSubscribe, 3, &wire.Subscribe{Topic: topic, Prefetch: 0})
		var ok wire.SubscribeOK
		if err := ok.Decode(r.expect(wire.OpSubscribeOK, 3)); err != nil {
			t.Fatal(err)
		}
		if ok.Prefetch != 0 || ok.Topic != topic || ok.Partition != 0 || ok.Group.Present {
			t.Fatalf("SUBSCRIBE_OK echo: %+v", ok)
		}
		readDeliver := func() (uint64, wire.Deliver) {
			t.Helper()
			for {
				f, err := r.read(waitTimeout)
				if err != nil {
					t.Fatalf("waiting for DELIVER: %v", err)
				}
				if f.h.Op == wire.OpPing {
					r.send(wire.OpPong, f.h.RequestID, nil)
					continue
				}
				if f.h.Op != wire.OpDeliver {
					t.Fatalf("got %v (%s), want DELIVER", f.h.Op, describe(f))
				}
				var d wire.Deliver
				if err := d.Decode(f.body); err != nil {
					t.Fatal(err)
				}
				if d.SubID != ok.SubID || d.Topic != topic {
					t.Fatalf("DELIVER for sub %d topic %q, want %d %q", d.SubID, d.Topic, ok.SubID, topic)
				}
				return f.h.RequestID, d
			}
		}
		for want := range uint64(3) {
			id, d := readDeliver()
			if d.Offset != want {
				t.Fatalf("DELIVER offset %d, want %d", d.Offset, want)
			}
			// Treated as prefetch 1: nothing more until this one is acked.
			r.expectQuiet(200 * time.Millisecond)
			r.send(wire.OpAck, id, &wire.Ack{Topic: topic, Tags: []uint64{d.DeliveryTag}})
		}
	})
}
