package replica

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/testkit"
)

// confirms records which waits were released, and how.
type confirms struct {
	mu   sync.Mutex
	ok   []uint64
	errs []error
}

func (c *confirms) wait(g *Gate, off uint64) {
	g.Wait(off, func(err error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if err != nil {
			c.errs = append(c.errs, err)
			return
		}
		c.ok = append(c.ok, off)
	})
}

func (c *confirms) released() []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.ok)
}

// With two followers and two copies needed (majority of three), a confirm
// waits for the owner and one follower; a node outside the in-sync set
// does not count; the watermark is the second-highest durable offset.
func TestGateMajority(t *testing.T) {
	g := NewGate(2, []string{"b", "c"}, time.Hour)
	var c confirms
	for off := range uint64(10) {
		c.wait(g, off)
	}
	g.Local(10)
	if got := c.released(); len(got) != 0 {
		t.Fatalf("released %v on the owner's fsync alone", got)
	}
	g.Progress("x", 10) // not in sync
	g.Progress("b", 4)
	if got, want := c.released(), []uint64{0, 1, 2, 3}; !slices.Equal(got, want) {
		t.Fatalf("released %v, want %v", got, want)
	}
	if w := g.Watermark(); w != 4 {
		t.Fatalf("watermark %d, want 4", w)
	}
	g.Progress("c", 8)
	if got := c.released(); len(got) != 8 {
		t.Fatalf("released %v after c reached 8", got)
	}
	g.Progress("b", 3) // progress never goes back
	if w := g.Watermark(); w != 8 {
		t.Fatalf("watermark %d, want 8", w)
	}
	c.wait(g, 2) // already replicated: at once
	if got := c.released(); got[len(got)-1] != 2 {
		t.Fatalf("an offset below the watermark waited: %v", got)
	}
}

// A policy the in-sync set cannot meet fails at once and says why; a
// shrunk set keeps the remaining members' progress; a confirm that does
// not get its copies in time fails with ErrConfirmTimeout.
func TestGateRefusesAndTimesOut(t *testing.T) {
	g := NewGate(3, []string{"b"}, 50*time.Millisecond)
	var c confirms
	c.wait(g, 0)
	if len(c.errs) != 1 {
		t.Fatalf("a policy needing 3 copies of 2 replicas: %v", c.errs)
	}
	g.SetMembers(2, []string{"b"})
	g.Local(5)
	g.Progress("b", 5)
	g.SetMembers(2, []string{"b", "c"})
	if w := g.Watermark(); w != 5 {
		t.Fatalf("watermark %d after c joined, want 5 (b kept its progress)", w)
	}
	c.wait(g, 7)
	testkit.Eventually(t, 5*time.Second, "the confirm to time out", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.errs) == 2
	})
	if !errors.Is(c.errs[1], ErrConfirmTimeout) {
		t.Fatalf("late confirm: %v", c.errs[1])
	}
}
