package queue

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/clock"
	"github.com/fibrilgo/fibril/core/storage"
	"github.com/fibrilgo/fibril/core/storage/faultfs"
	"github.com/fibrilgo/fibril/core/testkit"
	"github.com/fibrilgo/fibril/core/wire"
)

// chanConsumer hands deliveries to a goroutine; the channel holds at least
// the prefetch, so Deliver never blocks while no lease runs out (the clock
// does not move in the tests that use it).
type chanConsumer chan *Delivery

func (c chanConsumer) Deliver(d *Delivery) bool { c <- d; return true }

// crashWorld runs publishers and consumers against a Manager on faultfs.
type crashWorld struct {
	t    *testing.T
	opts Options
	m    *Manager

	mu        sync.Mutex
	confirmed map[string]bool // payloads whose confirm said ok
	acked     map[string]bool // payloads whose Ack returned
	nConfirm  int
	reached   chan struct{}
	target    int
}

func crashOptions(fs *faultfs.FS) Options {
	return Options{
		Dir: "/data/queues",
		Storage: storage.Options{
			Fsync:           storage.FsyncAlways,
			FS:              fs,
			SegmentMaxBytes: 8 << 10, // rolls and retention deletions all the time
			Logger:          quietLogger(),
		},
		AutoCreate: true,
		Clock:      clock.NewFake(t0),
		Logger:     quietLogger(),
	}
}

var crashSrc = Key{Topic: "jobs", Group: wire.Some("g")}
var crashDead = Key{Topic: "dead"}

// run publishes from two goroutines and consumes every partition with a
// random mix of ack, retry and terminal nack (→ DLQ) until the target
// number of confirms is reached, then returns with everything running.
func (w *crashWorld) run(rng *rand.Rand, seed uint64, stop chan struct{}, wg *sync.WaitGroup) {
	for pub := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				p, err := w.m.Partition(crashSrc, uint32(i%2))
				if err != nil {
					return
				}
				payload := fmt.Sprintf("s%d-p%d-%d", seed, pub, i)
				err = p.Publish(&Message{Payload: []byte(payload), Headers: wire.Headers{{Key: "n", Value: payload}}}, func(_ uint64, err error) {
					if err != nil {
						return
					}
					w.mu.Lock()
					w.confirmed[payload] = true
					w.nConfirm++
					if w.nConfirm == w.target {
						close(w.reached)
					}
					w.mu.Unlock()
				})
				if err != nil {
					return
				}
			}
		}()
	}
	for part := range uint32(2) {
		p, err := w.m.Partition(crashSrc, part)
		if err != nil {
			w.t.Fatal(err)
		}
		ch := make(chanConsumer, 8)
		s, err := p.Subscribe(ch, SubscribeOptions{Prefetch: 8})
		if err != nil {
			w.t.Fatal(err)
		}
		crng := rand.New(rand.NewPCG(rng.Uint64(), uint64(part)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case d := <-ch:
					switch x := crng.IntN(10); {
					case x < 6:
						s.Ack(d.Tag)
						w.mu.Lock()
						w.acked[string(d.Payload)] = true
						w.mu.Unlock()
					case x < 9:
						s.Nack([]uint64{d.Tag}, true, wire.None[uint64]())
					default:
						s.Nack([]uint64{d.Tag}, false, wire.None[uint64]())
					}
				}
			}
		}()
	}
}

// S-36 (core/storage/README.md#fsync-policies): under fsync=always a confirmed message is
// never lost by a power loss at any moment — it is still queued, or it was
// acked, or its dead-letter copy is in the DLQ. Publishers, consumers
// (acks, retries, terminal nacks into a DLQ), segment rolls, retention and
// state-journal entries all run when the power goes.
func TestPowerLossNeverLosesConfirmed_S36(t *testing.T) {
	seeds := 40
	if testing.Short() {
		seeds = 10
	}
	for seed := range uint64(seeds) {
		rng := rand.New(rand.NewPCG(seed, 42))
		fs := faultfs.New()
		w := &crashWorld{t: t, opts: crashOptions(fs), confirmed: map[string]bool{}, acked: map[string]bool{},
			reached: make(chan struct{}), target: 20 + rng.IntN(300)}
		m, err := Open(w.opts)
		if err != nil {
			t.Fatal(err)
		}
		w.m = m
		if _, err := m.DeclareQueue(QueueSpec{Key: crashSrc, PartitionCount: wire.Some[uint32](2), MaxRetries: wire.Some[uint32](1),
			DLQ: wire.Some(wire.DLQPolicy{Kind: wire.DLQNamed, Topic: crashDead.Topic})}); err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		w.run(rng, seed, stop, &wg)
		<-w.reached
		crashed := fs.Crash(rng)
		close(stop)
		wg.Wait()
		m.Close() // errors expected: the old filesystem is gone

		w.mu.Lock()
		confirmed, acked := w.confirmed, w.acked
		w.mu.Unlock()
		opts := crashOptions(crashed)
		m2, err := Open(opts)
		if err != nil {
			t.Fatalf("seed %d: reopen: %v", seed, err)
		}
		if q := m2.Quarantined(); len(q) != 0 {
			t.Fatalf("seed %d: quarantined after a power loss: %+v", seed, q)
		}
		left := drain(t, m2, crashSrc)
		dead := drain(t, m2, crashDead)
		lost := 0
		for pl := range confirmed {
			if left[pl] == 0 && dead[pl] == 0 && !acked[pl] {
				lost++
				if lost < 5 {
					t.Errorf("seed %d: confirmed message %s lost", seed, pl)
				}
			}
		}
		if lost > 0 {
			t.Fatalf("seed %d: %d of %d confirmed messages lost", seed, lost, len(confirmed))
		}
		m2.Close()
	}
}

// S-25, S-57: after a process crash (the page cache survives, nothing is
// closed) acked messages never return, every unacked one does, and retry
// counts are kept.
func TestProcessCrashAckedNeverReturn_S25(t *testing.T) {
	for seed := range uint64(10) {
		rng := rand.New(rand.NewPCG(seed, 7))
		fs := faultfs.New()
		opts := crashOptions(fs)
		// One segment: the abandoned manager's retention must not delete
		// files under the new one's feet.
		opts.Storage.SegmentMaxBytes = 0
		m, err := Open(opts)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := m.Partition(crashSrc, 0)
		const n = 300
		var confirms sync.WaitGroup
		confirms.Add(n)
		for i := range n {
			if err := p.Publish(&Message{Payload: []byte(fmt.Sprint(i))}, func(uint64, error) { confirms.Done() }); err != nil {
				t.Fatal(err)
			}
		}
		confirms.Wait() // only confirmed messages are promised to survive
		r := &recorder{}
		s, _ := p.Subscribe(r, SubscribeOptions{Prefetch: 1000})
		acked := map[string]bool{}
		retried := map[string]int{}
		for _, d := range r.take() {
			switch rng.IntN(3) {
			case 0:
				s.Ack(d.Tag)
				acked[string(d.Payload)] = true
			case 1:
				s.Nack([]uint64{d.Tag}, true, wire.None[uint64]())
				retried[string(d.Payload)] = 1
			}
		}
		// The "crash": the old manager is abandoned, never closed; a new
		// one opens what the old one wrote to the (surviving) page cache.
		m2, err := Open(opts)
		if err != nil {
			t.Fatal(err)
		}
		p2, _ := m2.Partition(crashSrc, 0)
		r2 := &recorder{}
		p2.Subscribe(r2, SubscribeOptions{Prefetch: 1000})
		got := map[string]bool{}
		for _, d := range r2.take() {
			pl := string(d.Payload)
			if acked[pl] {
				t.Fatalf("seed %d: acked message %s returned", seed, pl)
			}
			got[pl] = true
			v, _ := header(d, "fibril.retries")
			if want := retried[pl]; (want == 0 && v != "") || (want == 1 && v != "1") {
				t.Fatalf("seed %d: message %s fibril.retries=%q, want %d", seed, pl, v, want)
			}
		}
		if len(got)+len(acked) != n {
			t.Fatalf("seed %d: %d returned + %d acked != %d", seed, len(got), len(acked), n)
		}
		m2.Close()
	}
}

// S-145: engine state journaled for a record that never reached the disk
// must not outlive the recovery that dropped the record. A message is
// readable before it is durable, so it can be NACKed (requeue, not_before
// ahead) while its record is still unsynced; the crash keeps the journal
// entry and loses the record. The next message published takes the same
// offset and must start clean — at this restart and at every later one: not
// delayed, not carrying the old retry count (max_retries 1 would otherwise
// dead-letter it on its first NACK).
func TestLostRecordsEngineStateDoesNotReachItsSuccessor_S145(t *testing.T) {
	fs := faultfs.New()
	opts := crashOptions(fs)
	opts.Storage.Fsync = storage.FsyncNone // the record is written, never fsynced
	fake := opts.Clock.(*clock.Fake)
	m, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	spec := QueueSpec{Key: crashSrc, PartitionCount: wire.Some[uint32](1), MaxRetries: wire.Some[uint32](1),
		DLQ: wire.Some(wire.DLQPolicy{Kind: wire.DLQNamed, Topic: crashDead.Topic})}
	if _, err := m.DeclareQueue(spec); err != nil {
		t.Fatal(err)
	}
	p, err := m.Partition(crashSrc, 0)
	if err != nil {
		t.Fatal(err)
	}
	now := fake.Now().UnixMilli()
	if err := p.Publish(&Message{Payload: []byte("old"), Received: now}, nil); err != nil {
		t.Fatal(err)
	}
	r := &recorder{}
	s, err := p.Subscribe(r, SubscribeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	var ds []*Delivery
	testkit.Eventually(t, 5*time.Second, "the unsynced message delivered", func() bool {
		ds = append(ds, r.take()...)
		return len(ds) == 1
	})
	if ds[0].Offset != 0 {
		t.Fatalf("first message at offset %d", ds[0].Offset)
	}
	s.Nack(tags(ds), true, wire.Some(uint64(now+3_600_000)))

	// Power loss: the journal had just been fsynced, the log never was.
	crashed := fs.CrashSyncing(func(path string) bool { return strings.HasSuffix(path, ".jnl") })
	m.Close() // errors expected: the old filesystem is gone

	opts = crashOptions(crashed)
	opts.Clock = fake
	m, err = Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	p, err = m.Partition(crashSrc, 0)
	if err != nil {
		t.Fatal(err)
	}
	type confirm struct {
		off uint64
		err error
	}
	done := make(chan confirm, 1)
	if err := p.Publish(&Message{Payload: []byte("new"), Received: now}, func(off uint64, err error) { done <- confirm{off, err} }); err != nil {
		t.Fatal(err)
	}
	if c := <-done; c.err != nil || c.off != 0 {
		t.Fatalf("new message confirmed at offset %d, err %v; want offset 0", c.off, c.err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}

	m, err = Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	p, err = m.Partition(crashSrc, 0)
	if err != nil {
		t.Fatal(err)
	}
	if d := p.Depth(); d.Delayed != 0 || d.Ready != 1 {
		t.Fatalf("after the restarts the new message is %+v, want ready and not delayed", d)
	}
	r = &recorder{}
	s, err = p.Subscribe(r, SubscribeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	ds = nil
	testkit.Eventually(t, 5*time.Second, "the new message delivered", func() bool {
		ds = append(ds, r.take()...)
		return len(ds) == 1
	})
	if string(ds[0].Payload) != "new" {
		t.Fatalf("delivered %q, want the new message", ds[0].Payload)
	}
	if v, ok := header(ds[0], "fibril.retries"); ok {
		t.Fatalf("the new message carries fibril.retries=%q from the lost one", v)
	}
	s.Nack(tags(ds), true, noTime)
	ds = nil
	testkit.Eventually(t, 5*time.Second, "the NACKed message redelivered", func() bool {
		ds = append(ds, r.take()...)
		return len(ds) == 1
	})
	if v, _ := header(ds[0], "fibril.retries"); string(ds[0].Payload) != "new" || v != "1" {
		t.Fatalf("redelivered %q with fibril.retries=%q, want the new message retried once", ds[0].Payload, v)
	}
	if d := drainDead(t, m); d != 0 {
		t.Fatalf("%d messages dead-lettered", d)
	}
}

// drainDead counts what the dead-letter queue of the crash tests holds.
func drainDead(t *testing.T, m *Manager) int {
	t.Helper()
	n := 0
	for _, c := range drain(t, m, crashDead) {
		n += c
	}
	return n
}
