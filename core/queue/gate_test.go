package queue

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// heldGate is a ConfirmGate that holds every confirm until the test
// releases it.
type heldGate struct {
	mu    sync.Mutex
	offs  []uint64
	dones []func(error)
}

func (g *heldGate) Confirm(off uint64, done func(error)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.offs = append(g.offs, off)
	g.dones = append(g.dones, done)
}

// release answers every held confirm with err.
func (g *heldGate) release(err error) []uint64 {
	g.mu.Lock()
	offs, dones := g.offs, g.dones
	g.offs, g.dones = nil, nil
	g.mu.Unlock()
	for _, d := range dones {
		d(err)
	}
	return offs
}

// A gated partition confirms a publish only when its gate says so (with
// the gate's error when it fails), and delivers a record for the first
// time only below the limit its gate's owner sets (S-143).
func TestGateHoldsConfirmsAndDeliveries(t *testing.T) {
	g := &heldGate{}
	var opened *Partition
	e := newEnv(t, func(o *Options) {
		o.Gates = func(p Gated) ConfirmGate { opened, _ = p.(*Partition); return g }
	})
	p := e.part("orders", 0)
	if opened != p {
		t.Fatalf("Gates saw %v, want the opened partition", opened)
	}
	if k, n := p.Ref(); k.Topic != "orders" || n != 0 {
		t.Fatalf("Ref() = %v %d", k, n)
	}
	_, rec := e.sub(p, 10, false)

	type result struct {
		off uint64
		err error
	}
	results := make(chan result, 4)
	for _, s := range []string{"a", "b", "c"} {
		if err := p.Publish(&Message{Payload: []byte(s), Received: e.nowMs()}, func(off uint64, err error) {
			results <- result{off, err}
		}); err != nil {
			t.Fatal(err)
		}
	}
	p.log.Sync()
	deadline := time.Now().Add(5 * time.Second)
	for {
		g.mu.Lock()
		n := len(g.offs)
		g.mu.Unlock()
		if n == 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case r := <-results:
		t.Fatalf("confirmed %+v before the gate released it", r)
	default:
	}
	if ds := rec.take(); len(ds) != 0 {
		t.Fatalf("delivered %v before the limit was set", payloads(ds))
	}
	if offs := g.release(nil); len(offs) != 3 || offs[0] != 0 || offs[2] != 2 {
		t.Fatalf("the gate saw offsets %v, want 0..2 in order", offs)
	}
	for range 3 {
		if r := <-results; r.err != nil {
			t.Fatalf("confirm %d: %v", r.off, r.err)
		}
	}

	p.SetDeliverable(2)
	wantPayloads(t, rec.take(), "a", "b")
	p.RaiseDeliverable(1) // late: changes nothing
	p.RaiseDeliverable(Unlimited)
	wantPayloads(t, rec.take(), "c")

	boom := errors.New("not replicated")
	if err := p.Publish(&Message{Payload: []byte("d"), Received: e.nowMs()}, func(off uint64, err error) {
		results <- result{off, err}
	}); err != nil {
		t.Fatal(err)
	}
	p.log.Sync()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if offs := g.release(boom); len(offs) > 0 {
			break
		}
	}
	if r := <-results; !errors.Is(r.err, boom) || r.off != 3 {
		t.Fatalf("confirm of d = %+v, want offset 3 and the gate's error", r)
	}
}
