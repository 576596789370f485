package queue

import (
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/clock"
	"github.com/fibrilgo/fibril/core/storage"
	"github.com/fibrilgo/fibril/core/testkit"
	"github.com/fibrilgo/fibril/core/wire"
)

// t0 is where every test's fake clock starts.
var t0 = time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)

// recorder is a Consumer that keeps every delivery.
type recorder struct {
	mu    sync.Mutex
	ds    []*Delivery
	limit int // > 0: ask for a pause once this many are held (Deliver returns false)
}

func (r *recorder) Deliver(d *Delivery) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ds = append(r.ds, d)
	return r.limit == 0 || len(r.ds) < r.limit
}

// take returns the deliveries received since the last take.
func (r *recorder) take() []*Delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	ds := r.ds
	r.ds = nil
	return ds
}

func payloads(ds []*Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = string(d.Payload)
	}
	return out
}

func offsets(ds []*Delivery) []uint64 {
	out := make([]uint64, len(ds))
	for i, d := range ds {
		out[i] = d.Offset
	}
	return out
}

func tags(ds []*Delivery) []uint64 {
	out := make([]uint64, len(ds))
	for i, d := range ds {
		out[i] = d.Tag
	}
	return out
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

type env struct {
	t     testing.TB
	m     *Manager
	clock *clock.Fake
	opts  Options
}

// newEnv opens a Manager on a temp dir with a fake clock, FsyncNone (the
// tests that care about fsync set their own) and AutoCreate on.
func newEnv(t testing.TB, mod ...func(*Options)) *env {
	t.Helper()
	clock := clock.NewFake(t0)
	opts := Options{
		Dir:        t.TempDir(),
		Storage:    storage.Options{Fsync: storage.FsyncNone, Logger: quietLogger()},
		AutoCreate: true,
		Clock:      clock,
		Logger:     quietLogger(),
	}
	for _, f := range mod {
		f(&opts)
	}
	e := &env{t: t, clock: clock, opts: opts}
	e.open()
	t.Cleanup(func() {
		if e.m != nil {
			e.m.Close()
		}
	})
	return e
}

func (e *env) open() {
	e.t.Helper()
	m, err := Open(e.opts)
	if err != nil {
		e.t.Fatalf("Open: %v", err)
	}
	e.m = m
}

// restart closes the manager and opens it again on the same directory.
func (e *env) restart() {
	e.t.Helper()
	if err := e.m.Close(); err != nil {
		e.t.Fatalf("Close: %v", err)
	}
	e.m = nil
	e.open()
}

func (e *env) part(topic string, n uint32) *Partition {
	e.t.Helper()
	p, err := e.m.Partition(Key{Topic: topic}, n)
	if err != nil {
		e.t.Fatalf("Partition(%s, %d): %v", topic, n, err)
	}
	return p
}

func (e *env) sub(p *Partition, prefetch uint32, autoAck bool) (*Subscription, *recorder) {
	e.t.Helper()
	r := &recorder{}
	s, err := p.Subscribe(r, SubscribeOptions{Prefetch: prefetch, AutoAck: autoAck})
	if err != nil {
		e.t.Fatalf("Subscribe: %v", err)
	}
	return s, r
}

func (e *env) nowMs() int64 { return e.clock.Now().UnixMilli() }

// pub publishes payload (fire-and-forget) and returns nothing; mod may
// adjust the message.
func (e *env) pub(p *Partition, payload string, mod ...func(*Message)) {
	e.t.Helper()
	msg := &Message{Payload: []byte(payload), Received: e.nowMs()}
	for _, f := range mod {
		f(msg)
	}
	if err := p.Publish(msg, nil); err != nil {
		e.t.Fatalf("Publish(%q): %v", payload, err)
	}
}

func (e *env) pubN(p *Partition, n int, prefix string) {
	e.t.Helper()
	for i := range n {
		e.pub(p, prefix+itoa(i))
	}
}

func itoa(i int) string { return string(rune('a'+i/26)) + string(rune('a'+i%26)) }

func withTTL(ms uint64) func(*Message) {
	return func(m *Message) { m.TTLMillis = wire.Some(ms) }
}

func withHeaders(h ...string) func(*Message) {
	return func(m *Message) {
		for i := 0; i+1 < len(h); i += 2 {
			m.Headers = append(m.Headers, wire.Header{Key: h[i], Value: h[i+1]})
		}
	}
}

// waitDLQ waits until every dead-letter copy started so far has been
// applied to its source (the copy's confirm comes back on a storage
// goroutine).
func (e *env) waitDLQ() { e.m.dlqWG.Wait() }

func header(d *Delivery, key string) (string, bool) { return d.Headers.Get(key) }

func wantCode(t *testing.T, err error, sentinel error) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v", sentinel)
	}
	if !errors.Is(err, sentinel) {
		t.Fatalf("got %v (code %d), want %v", err, core.Code(err), sentinel)
	}
}

func wantPayloads(t *testing.T, ds []*Delivery, want ...string) {
	t.Helper()
	got := payloads(ds)
	if !slices.Equal(got, want) {
		t.Fatalf("deliveries %q, want %q", got, want)
	}
}

// drain reads every message left in q (auto-ack), checking that no offset
// is delivered twice.
func drain(t *testing.T, m *Manager, q Key) map[string]int {
	t.Helper()
	out := map[string]int{}
	parts := 1
	for _, qi := range m.Queues() {
		if qi.Key == q {
			parts = int(qi.PartitionCount)
		}
	}
	for n := range uint32(parts) {
		p, err := m.Partition(q, n)
		if err != nil {
			t.Fatal(err)
		}
		r := &recorder{}
		s, err := p.Subscribe(r, SubscribeOptions{AutoAck: true})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[uint64]bool{}
		testkit.Eventually(t, 10*time.Second, "every message settled", func() bool { return p.Depth() == Depth{} })
		for _, d := range r.take() {
			if seen[d.Offset] {
				t.Fatalf("%s partition %d: offset %d delivered twice", q, n, d.Offset)
			}
			seen[d.Offset] = true
			key := string(d.Payload)
			out[key]++
		}
		s.Close()
	}
	return out
}

var noTime = wire.None[uint64]()
