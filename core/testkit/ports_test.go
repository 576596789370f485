package testkit

import "testing"

// FreePort never returns a port twice, and each can be bound.
func TestFreePort(t *testing.T) {
	seen := map[int]bool{}
	for range 20 {
		p := FreePort(t)
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		if !portFree(p) {
			t.Fatalf("port %d is not free", p)
		}
		if lo := ephemeralLow(); lo > lowPortBase+1000 && (p < lowPortBase || p >= lo) {
			t.Fatalf("port %d outside [%d, %d)", p, lowPortBase, lo)
		}
	}
}
