package queue

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/testkit"
	"github.com/fibrilgo/fibril/core/wire"
)

// Concurrency: publishers, consumers that ack, retry, delay, fail and
// close their subscriptions, leases running out and TTLs expiring as the
// clock moves — with two queues dead-lettering into each other (the DLQ
// copy must never run under the source's lock). At the end every message
// is accounted for exactly once: acked, or dead-lettered (and its copy
// then accounted for the same way); none is lost or settled twice.
func TestConcurrentStress_S47_S54_S58(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.Settings = func() Settings {
			s := DefaultSettings()
			s.InflightTTL = 50 * time.Millisecond
			s.ExpiryPollMin = 20 * time.Millisecond
			return s
		}
	})
	a, b := Key{Topic: "a"}, Key{Topic: "b"}
	for _, c := range [][2]Key{{a, b}, {b, a}} {
		if _, err := e.m.DeclareQueue(QueueSpec{Key: c[0], PartitionCount: wire.Some[uint32](2), MaxRetries: wire.Some[uint32](2),
			DLQ: wire.Some(wire.DLQPolicy{Kind: wire.DLQNamed, Topic: c[1].Topic})}); err != nil {
			t.Fatal(err)
		}
	}
	var parts []*Partition
	for _, k := range []Key{a, b} {
		for n := range uint32(2) {
			p, _ := e.m.Partition(k, n)
			parts = append(parts, p)
		}
	}
	const perPublisher = 400
	stop := make(chan struct{})
	var wg, pubs sync.WaitGroup
	var rounds sync.WaitGroup // consumer rounds still to run before stopping
	rounds.Add(4 * 30)
	for i := range 2 {
		pubs.Add(1)
		go func() {
			defer pubs.Done()
			for j := range perPublisher {
				p := parts[(i+j)%len(parts)]
				msg := &Message{Payload: fmt.Appendf(nil, "p%d-%d", i, j), Received: e.nowMs()}
				if j%7 == 0 {
					msg.TTLMillis = wire.Some[uint64](30)
				}
				if err := p.Publish(msg, nil); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for c := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 9))
			for round := 0; ; round++ {
				select {
				case <-stop:
					return
				default:
				}
				p := parts[rng.IntN(len(parts))]
				ch := &recorder{}
				s, err := p.Subscribe(ch, SubscribeOptions{Prefetch: 4})
				if err != nil {
					t.Error(err)
					return
				}
				// A lease may run out while its delivery is still queued
				// here, so the subscription can be handed more than its
				// prefetch (as a session's writer queue can).
				for k := 0; k < 20; k++ {
					ds := ch.take()
					if len(ds) == 0 {
						break
					}
					d := ds[0]
					ch.mu.Lock()
					ch.ds = append(ds[1:], ch.ds...)
					ch.mu.Unlock()
					switch x := rng.IntN(10); {
					case x < 6:
						s.Ack(d.Tag)
					case x < 8:
						s.Nack([]uint64{d.Tag}, true, wire.None[uint64]())
					case x < 9:
						s.Nack([]uint64{d.Tag}, true, wire.Some(uint64(e.nowMs()+10)))
					default:
						s.Nack([]uint64{d.Tag}, false, wire.None[uint64]())
					}
				}
				s.Close()
				if round < 30 {
					rounds.Done()
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // the clock: leases, delays and TTLs run out while all this goes on
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			e.clock.Advance(5 * time.Millisecond)
			runtime.Gosched()
		}
	}()
	pubs.Wait()
	rounds.Wait() // every consumer ran 30 rounds of churn
	close(stop)
	wg.Wait()
	e.waitDLQ()

	// Everything left is ready or delayed (no subscription holds anything).
	e.clock.Advance(time.Hour)
	e.waitDLQ()
	left := 0
	for _, p := range parts {
		d := p.Depth()
		if d.Inflight != 0 || d.Delayed != 0 {
			t.Fatalf("%s: %+v after every subscription closed", p.name, d)
		}
		left += int(d.Ready)
	}
	// Drain all four partitions; every message must be exactly once
	// somewhere: acked before, or still queued (copies made by
	// dead-lettering count under their payload).
	total := 0
	for _, p := range parts {
		r := &recorder{}
		s, err := p.Subscribe(r, SubscribeOptions{AutoAck: true})
		if err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 10*time.Second, "every message settled", func() bool { return p.Depth() == Depth{} })
		total += len(r.take())
		s.Close()
	}
	if total != left {
		t.Fatalf("drained %d, depth said %d", total, left)
	}
	st := e.m.Stats()
	t.Logf("stats %+v, left after the churn %d", st, left)
	// Published = originals + dead-letter copies, and each of them ends
	// either acked (by a consumer or the drain's auto-ack) or dead-lettered
	// (copied, then settled): both queues have a DLQ, so nothing is
	// discarded, and nothing is settled twice.
	if st.Discarded != 0 {
		t.Fatalf("discarded %d with a DLQ on every queue", st.Discarded)
	}
	if st.Published != 2*perPublisher+st.DeadLettered {
		t.Fatalf("published %d != %d originals + %d dead-letter copies", st.Published, 2*perPublisher, st.DeadLettered)
	}
	if st.Acked != st.Published-st.DeadLettered {
		t.Fatalf("acked %d, want every message not dead-lettered (%d)", st.Acked, st.Published-st.DeadLettered)
	}
}
