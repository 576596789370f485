package testkit

import (
	"context"
	"net"
	"sync"
)

// DialLog counts a test client's dials per address and hands each to Next
// (a test's loopback guard): for tests that assert which brokers a client
// tried to reach, and how often.
type DialLog struct {
	Next func(ctx context.Context, network, addr string) (net.Conn, error)

	mu sync.Mutex
	n  map[string]int
}

// Dial counts the dial and passes it to Next; it fits client options'
// Dial field.
func (d *DialLog) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	if d.n == nil {
		d.n = map[string]int{}
	}
	d.n[addr]++
	d.mu.Unlock()
	return d.Next(ctx, network, addr)
}

// Count is how many dials addr has had.
func (d *DialLog) Count(addr string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n[addr]
}
