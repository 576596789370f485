package queue

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/wire"
)

// S-57, S-61: acks settle; unknown, repeated and foreign tags are ignored
// silently.
func TestAckIdempotentAndSilent_S57_S61(t *testing.T) {
	e := newEnv(t)
	p := e.part("orders", 0)
	e.pubN(p, 4, "m")
	s1, r1 := e.sub(p, 2, false)
	s2, r2 := e.sub(p, 2, false)
	d1, d2 := r1.take(), r2.take()
	s1.Ack(d2[0].Tag, 999999, 0) // another subscription's tag, unknown tags
	if d := p.Depth(); d.Inflight != 4 {
		t.Fatalf("foreign/unknown tags settled something: %+v", d)
	}
	s1.Ack(d1[0].Tag, d1[0].Tag, d1[1].Tag)
	s1.Ack(d1[0].Tag)
	s2.Ack(d2[0].Tag, d2[1].Tag)
	if d := p.Depth(); d != (Depth{}) {
		t.Fatalf("depth %+v", d)
	}
	if st := e.m.Stats(); st.Acked != 4 {
		t.Fatalf("acked %d", st.Acked)
	}
	if p.log.SettledFrontier() != 4 {
		t.Fatalf("frontier %d", p.log.SettledFrontier())
	}
}

// S-49, S-58: requeue=true → retry count + 1, Ready again, and the
// redelivery carries fibril.retries.
func TestNackRequeueCountsRetries_S49_S58(t *testing.T) {
	e := newEnv(t)
	p := e.part("orders", 0)
	e.pub(p, "m")
	s, r := e.sub(p, 1, false)
	for want := 1; want <= 3; want++ {
		ds := r.take()
		if len(ds) != 1 {
			t.Fatalf("round %d: %d deliveries", want, len(ds))
		}
		s.Nack([]uint64{ds[0].Tag}, true, noTime)
		got := r.take()
		if len(got) != 1 {
			t.Fatalf("not redelivered after nack %d", want)
		}
		if v, _ := header(got[0], "fibril.retries"); v != strconv.Itoa(want) {
			t.Fatalf("fibril.retries = %q, want %d", v, want)
		}
		r.ds = got // put back for the next round
	}
	if st := e.m.Stats(); st.Redelivered != 3 || st.Delivered != 4 {
		t.Fatalf("stats %+v", st)
	}
}

// S-58: requeue with not_before holds the message until then.
func TestNackNotBefore_S58(t *testing.T) {
	e := newEnv(t)
	p := e.part("orders", 0)
	e.pubN(p, 2, "m")
	s, r := e.sub(p, 1, false)
	ds := r.take()
	s.Nack([]uint64{ds[0].Tag}, true, wire.Some(uint64(e.nowMs()+5000)))
	one := r.take()
	if !slices.Equal(offsets(one), []uint64{1}) {
		t.Fatalf("after delayed nack: %v, want [1]", offsets(one))
	}
	if d := p.Depth(); d.Delayed != 1 || d.Inflight != 1 {
		t.Fatalf("depth %+v", d)
	}
	s.Ack(one[0].Tag)
	e.clock.Advance(4999 * time.Millisecond)
	if got := r.take(); len(got) != 0 {
		t.Fatalf("delivered before not_before: %v", offsets(got))
	}
	e.clock.Advance(time.Millisecond)
	got := r.take()
	if !slices.Equal(offsets(got), []uint64{0}) {
		t.Fatalf("not delivered at not_before: %v", offsets(got))
	}
	if v, _ := header(got[0], "fibril.retries"); v != "1" {
		t.Fatalf("retries %q", v)
	}
	// A not_before in the past is an immediate retry.
	s.Nack([]uint64{got[0].Tag}, true, wire.Some(uint64(e.nowMs()-1)))
	if got := r.take(); len(got) != 1 {
		t.Fatalf("past not_before not immediate")
	}
}

// S-59 (docs/protocol.md#answers wins: no reply): not_before with requeue=false applies
// nothing.
func TestNackNotBeforeWithoutRequeueAppliesNothing_S59(t *testing.T) {
	e := newEnv(t)
	e.m.DeclareQueue(QueueSpec{Key: Key{Topic: "orders"}, DLQ: wire.Some(wire.DLQPolicy{Kind: wire.DLQNamed, Topic: "dead"})})
	p := e.part("orders", 0)
	e.pub(p, "m")
	s, r := e.sub(p, 1, false)
	ds := r.take()
	s.Nack(tags(ds), false, wire.Some(uint64(e.nowMs()+1000)))
	if d := p.Depth(); d.Inflight != 1 {
		t.Fatalf("depth %+v", d)
	}
	s.Ack(tags(ds)...)
	if d := p.Depth(); d != (Depth{}) {
		t.Fatalf("the delivery was not left as it was: %+v", d)
	}
}

// S-60, S-66, S-67: a retry of a message whose count equals max_retries
// dead-letters it (retries_exhausted, retry_count = N) with payload,
// content type, user headers and every stroma.dlq header; the source is
// settled; the DLQ is an ordinary queue.
func TestMaxRetriesDeadLetters_S60_S66_S67(t *testing.T) {
	e := newEnv(t)
	src := Key{Topic: "orders", Group: wire.Some("eu")}
	target := Key{Topic: "dead", Group: wire.Some("letters")}
	if _, err := e.m.DeclareQueue(QueueSpec{Key: src, DLQ: wire.Some(wire.DLQPolicy{Kind: wire.DLQNamed, Topic: target.Topic, Group: target.Group}), MaxRetries: wire.Some[uint32](2)}); err != nil {
		t.Fatal(err)
	}
	p, _ := e.m.Partition(src, 0)
	e.pub(p, "first")
	e.pub(p, "payload", func(m *Message) {
		m.ContentType = wire.ContentType{Tag: wire.ContentCustom, Custom: "application/x-thing"}
		m.Headers = wire.Headers{{Key: "user", Value: "u"}, {Key: "fibril.client.producer_id", Value: "p1"}}
		m.Published = 42
	})
	s, r := e.sub(p, 1, false)
	s.Ack(r.take()[0].Tag)
	for range 2 {
		ds := r.take()
		s.Nack(tags(ds), true, noTime)
	}
	ds := r.take()
	if v, _ := header(ds[0], "fibril.retries"); v != "2" {
		t.Fatalf("retries %q", v)
	}
	at := e.nowMs()
	s.Nack(tags(ds), true, noTime) // count == max_retries → DLQ
	e.waitDLQ()
	if got := r.take(); len(got) != 0 {
		t.Fatalf("exhausted message redelivered: %v", offsets(got))
	}
	if d := p.Depth(); d != (Depth{}) {
		t.Fatalf("source depth %+v", d)
	}
	if !p.log.IsSettled(1) {
		t.Fatal("source not settled")
	}
	tp, err := e.m.Partition(target, 0) // auto-created
	if err != nil {
		t.Fatal(err)
	}
	_, tr := e.sub(tp, 10, false)
	dl := tr.take()
	if len(dl) != 1 {
		t.Fatalf("DLQ holds %d", len(dl))
	}
	d := dl[0]
	if string(d.Payload) != "payload" || d.ContentType.Custom != "application/x-thing" || d.Published != 42 {
		t.Fatalf("dead letter %+v", d)
	}
	want := map[string]string{
		"user":                           "u",
		"fibril.client.producer_id":      "p1",
		"stroma.dlq.source_topic":        "orders",
		"stroma.dlq.source_group":        "eu",
		"stroma.dlq.source_offset":       "1",
		"stroma.dlq.retry_count":         "2",
		"stroma.dlq.reason":              "retries_exhausted",
		"stroma.dlq.dead_lettered_at_ms": strconv.FormatInt(at, 10),
	}
	if len(d.Headers) != len(want) {
		t.Fatalf("headers %+v", d.Headers)
	}
	for k, v := range want {
		if got, _ := header(d, k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if st := e.m.Stats(); st.DeadLettered != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// S-60: N = 0 dead-letters on the first retry; undeclared N is 5.
func TestMaxRetriesZeroAndDefault_S60(t *testing.T) {
	e := newEnv(t)
	dlq := wire.Some(wire.DLQPolicy{Kind: wire.DLQNamed, Topic: "dead"})
	e.m.DeclareQueue(QueueSpec{Key: Key{Topic: "zero"}, DLQ: dlq, MaxRetries: wire.Some[uint32](0)})
	e.m.DeclareQueue(QueueSpec{Key: Key{Topic: "five"}, DLQ: dlq})
	for _, c := range []struct {
		topic string
		nacks int
	}{{"zero", 1}, {"five", 6}} {
		p := e.part(c.topic, 0)
		e.pub(p, c.topic)
		s, r := e.sub(p, 1, false)
		for i := range c.nacks {
			ds := r.take()
			if len(ds) != 1 {
				t.Fatalf("%s: nack %d: %d deliveries", c.topic, i, len(ds))
			}
			s.Nack(tags(ds), true, noTime)
		}
		e.waitDLQ()
		if got := r.take(); len(got) != 0 {
			t.Fatalf("%s: still delivered after %d nacks", c.topic, c.nacks)
		}
	}
	tp := e.part("dead", 0)
	_, tr := e.sub(tp, 10, false)
	dl := tr.take()
	if len(dl) != 2 {
		t.Fatalf("DLQ holds %d", len(dl))
	}
	for _, d := range dl {
		want := map[string]string{"zero": "0", "five": "5"}[string(d.Payload)]
		if v, _ := header(d, "stroma.dlq.retry_count"); v != want {
			t.Errorf("%s retry_count %q, want %s", d.Payload, v, want)
		}
		if _, ok := header(d, "stroma.dlq.source_group"); ok {
			t.Errorf("source_group present for a source without a group (S-66)")
		}
	}
}

// S-58, S-63: requeue=false → terminal_nack into the DLQ; without a
// policy (or with discard) the message is discarded.
func TestTerminalNack_S58_S63(t *testing.T) {
	e := newEnv(t)
	e.m.DeclareQueue(QueueSpec{Key: Key{Topic: "withdlq"}, DLQ: wire.Some(wire.DLQPolicy{Kind: wire.DLQNamed, Topic: "dead"})})
	e.m.DeclareQueue(QueueSpec{Key: Key{Topic: "discard"}, DLQ: wire.Some(wire.DLQPolicy{Kind: wire.DLQDiscard})})
	for _, topic := range []string{"withdlq", "discard", "nopolicy"} {
		p := e.part(topic, 0)
		e.pub(p, topic)
		s, r := e.sub(p, 1, false)
		s.Nack(tags(r.take()), false, noTime)
		e.waitDLQ()
		if d := p.Depth(); d != (Depth{}) || !p.log.IsSettled(0) {
			t.Fatalf("%s: depth %+v", topic, d)
		}
	}
	_, tr := e.sub(e.part("dead", 0), 10, false)
	dl := tr.take()
	wantPayloads(t, dl, "withdlq")
	if v, _ := header(dl[0], "stroma.dlq.reason"); v != "terminal_nack" {
		t.Fatalf("reason %q", v)
	}
	if st := e.m.Stats(); st.Discarded != 2 || st.DeadLettered != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// S-64, S-65: policy global routes to the broker-wide target, read live;
// with none set it discards.
func TestGlobalDLQ_S64_S65(t *testing.T) {
	var target Key
	var set bool
	e := newEnv(t, func(o *Options) { o.GlobalDLQ = func() (Key, bool) { return target, set } })
	e.m.DeclareQueue(QueueSpec{Key: Key{Topic: "jobs"}, DLQ: wire.Some(wire.DLQPolicy{Kind: wire.DLQBrokerDLQ})})
	p := e.part("jobs", 0)
	e.pubN(p, 2, "m")
	s, r := e.sub(p, 1, false)
	s.Nack(tags(r.take()), false, noTime) // no global target: discarded
	target, set = Key{Topic: "global", Group: wire.Some("dlq")}, true
	s.Nack(tags(r.take()), false, noTime)
	e.waitDLQ()
	gp, _ := e.m.Partition(target, 0)
	_, gr := e.sub(gp, 10, false)
	wantPayloads(t, gr.take(), "mab")
	if st := e.m.Stats(); st.Discarded != 1 || st.DeadLettered != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// S-66: the copy is durable in the target before the source is settled:
// while the target's confirm is outstanding the source is not settled.
func TestDeadLetterSettlesSourceAfterCopyIsDurable_S66(t *testing.T) {
	e := newEnv(t)
	e.m.DeclareQueue(QueueSpec{Key: Key{Topic: "jobs"}, DLQ: wire.Some(wire.DLQPolicy{Kind: wire.DLQNamed, Topic: "dead"})})
	dead := e.part("dead", 0)
	p := e.part("jobs", 0)
	e.pub(p, "m")
	s, r := e.sub(p, 1, false)
	// Hold the target's commit goroutine: its next done callback blocks
	// until released, so the copy's confirm cannot arrive yet.
	release := make(chan struct{})
	entered := make(chan struct{})
	if err := dead.Publish(&Message{Payload: []byte("blocker")}, func(uint64, error) { close(entered); <-release }); err != nil {
		t.Fatal(err)
	}
	<-entered
	s.Nack(tags(r.take()), false, noTime)
	if p.log.IsSettled(0) {
		t.Fatal("source settled before the dead-letter copy was confirmed")
	}
	if d := p.Depth(); d != (Depth{}) {
		t.Fatalf("a message being dead-lettered is in no state: %+v", d)
	}
	close(release)
	e.waitDLQ()
	if !p.log.IsSettled(0) {
		t.Fatal("source not settled after the copy")
	}
}

// A queue may name itself as its DLQ: the copy is published after the
// source's lock is released, so this cannot deadlock (S-67: a DLQ is an
// ordinary queue).
func TestSelfDeadLetter_S67(t *testing.T) {
	e := newEnv(t)
	e.m.DeclareQueue(QueueSpec{Key: Key{Topic: "loop"}, DLQ: wire.Some(wire.DLQPolicy{Kind: wire.DLQNamed, Topic: "loop"})})
	p := e.part("loop", 0)
	e.pub(p, "m")
	s, r := e.sub(p, 1, false)
	s.Nack(tags(r.take()), false, noTime)
	e.waitDLQ()
	got := r.take()
	wantPayloads(t, got, "m")
	if v, _ := header(got[0], "stroma.dlq.source_offset"); v != "0" || got[0].Offset != 1 {
		t.Fatalf("copy %+v", got[0])
	}
	s.Nack(tags(got), false, noTime) // a dead letter of a dead letter: fresh stroma.dlq headers
	e.waitDLQ()
	again := r.take()
	n := 0
	for _, h := range again[0].Headers {
		if h.Key == "stroma.dlq.source_offset" {
			n++
			if h.Value != "1" {
				t.Fatalf("source_offset %q", h.Value)
			}
		}
	}
	if n != 1 {
		t.Fatalf("headers %+v", again[0].Headers)
	}
}
