package replica

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
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

// Below the in-sync floor a confirm fails at once and names the setting;
// an in-sync set too small for the policy is waited out (a member may
// join); a shrunk set keeps the remaining members' progress; a confirm
// that does not get its copies in time fails with ErrConfirmTimeout.
func TestGateRefusesAndTimesOut(t *testing.T) {
	g := NewGate(2, nil, time.Hour)
	g.SetMinInSync(2)
	var c confirms
	c.wait(g, 0)
	if len(c.errs) != 1 || !errors.Is(c.errs[0], ErrTooFewInSync) || !strings.Contains(c.errs[0].Error(), "replication.min_in_sync_replicas") {
		t.Fatalf("below the floor: %v", c.errs)
	}
	g.SetMinInSync(1)
	c.wait(g, 0) // the policy needs 2 copies and only the owner is in sync: it waits
	g.Local(1)
	if len(c.released()) != 0 || len(c.errs) != 1 {
		t.Fatalf("released %v (errors %v) with no follower in sync", c.released(), c.errs)
	}
	g.SetMembers(2, []string{"b"})
	g.Progress("b", 1)
	if got := c.released(); len(got) != 1 {
		t.Fatalf("released %v after b joined and reported", got)
	}

	g = NewGate(2, []string{"b"}, 50*time.Millisecond)
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
	if !errors.Is(c.errs[1], ErrConfirmTimeout) || !errors.Is(c.errs[1], ErrNotConfirmed) || !strings.Contains(c.errs[1].Error(), "replication.confirm_timeout_ms") {
		t.Fatalf("late confirm: %v", c.errs[1])
	}
}

// Confirmed follows the highest watermark and never falls; OnAdvance
// hears each rise of the watermark, also a rise back after it fell.
func TestGateConfirmedAndAdvance(t *testing.T) {
	g := NewGate(2, []string{"b", "c"}, time.Hour)
	var heard []uint64
	g.OnAdvance(func(m uint64) { heard = append(heard, m) })
	g.Local(10)
	g.Progress("b", 4)
	g.Progress("c", 6)
	if g.Confirmed() != 6 {
		t.Fatalf("Confirmed %d, want 6", g.Confirmed())
	}
	g.SetMembers(3, []string{"b", "c"}) // stricter: the watermark falls to 4, Confirmed stays
	if g.Watermark() != 4 || g.Confirmed() != 6 {
		t.Fatalf("watermark %d confirmed %d, want 4 and 6", g.Watermark(), g.Confirmed())
	}
	if !slices.Equal(heard, []uint64{4, 6}) {
		t.Fatalf("OnAdvance heard %v, want [4 6]", heard)
	}
	g.Progress("b", 5) // the watermark rises again, below what was confirmed: still heard
	if !slices.Equal(heard, []uint64{4, 6, 5}) || g.Confirmed() != 6 {
		t.Fatalf("OnAdvance heard %v (Confirmed %d), want [4 6 5] and 6", heard, g.Confirmed())
	}
	local, members := g.State()
	if local != 10 || members["b"] != 5 || members["c"] != 6 {
		t.Fatalf("State() = %d %v", local, members)
	}
}

// A fence fails the confirms at or past it, at once and later, with a
// retryable error, keeps the watermark below it, and lifts.
func TestGateFence(t *testing.T) {
	g := NewGate(2, []string{"b"}, time.Hour)
	var c confirms
	for off := range uint64(6) {
		c.wait(g, off)
	}
	g.Local(6)
	g.Progress("b", 2)
	g.SetFence(4)
	if got := c.released(); !slices.Equal(got, []uint64{0, 1}) || len(c.errs) != 2 {
		t.Fatalf("released %v, %d errors; want 0 1 and two refusals (4 and 5)", got, len(c.errs))
	}
	if !errors.Is(c.errs[0], ErrHandingOff) || !errors.Is(c.errs[0], core.ErrUnavailable) {
		t.Fatalf("refusal: %v", c.errs[0])
	}
	g.Progress("b", 6)
	if w := g.Watermark(); w != 4 {
		t.Fatalf("watermark %d behind a fence at 4", w)
	}
	if got := c.released(); !slices.Equal(got, []uint64{0, 1, 2, 3}) {
		t.Fatalf("released %v, want 0..3", got)
	}
	c.wait(g, 7)
	if len(c.errs) != 3 {
		t.Fatalf("a wait past the fence was not refused: %v", c.errs)
	}
	g.ClearFence()
	if w := g.Watermark(); w != 6 {
		t.Fatalf("watermark %d after the fence lifted, want 6", w)
	}
}
