package client

// Connections to a queue's owners are opened ahead of need. A repartition
// lists its new partitions, with their owners, when it places them (the
// topology shows both layouts), and fences producers to them only at the
// cutover, later. A client that dialed a new owner only when a fenced
// publish or a newly followed partition needed it paid the connect and the
// login (an argon2id verification: tens of milliseconds of broker CPU) in
// that publish's pause, measured at ~100 ms p99 (docs/performance.md).

// notePublishing records that this client publishes to the queue, so that
// its owners are dialed as the topology lists them (warmOwners).
func (c *Client) notePublishing(k countKey) {
	if _, ok := c.publishing.Load(k); !ok {
		c.publishing.Store(k, struct{}{})
	}
}

// warmOwners starts a connection, in the background, to every endpoint a
// partition of a queue this client publishes to, or follows with a
// subscription, is routed to and that has no connection yet. It runs
// after the topology cache changed.
func (c *Client) warmOwners() {
	qs := map[countKey]bool{}
	c.publishing.Range(func(k, _ any) bool {
		qs[k.(countKey)] = true
		return true
	})
	c.subsMu.Lock()
	for s := range c.subs {
		if s.follow {
			qs[countKey{s.topic, s.group}] = true
		}
	}
	c.subsMu.Unlock()
	if len(qs) == 0 {
		return
	}
	for _, addr := range c.topo.routesOf(qs) {
		c.pool.endpoint(addr).warm()
	}
}

// warm starts a dial unless the endpoint has a live connection, a dial in
// progress, or was retired. Nothing waits for it: a failed dial is
// retried by the first operation that needs the endpoint.
func (ep *endpoint) warm() {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.retired || ep.conn != nil && !ep.conn.closed() {
		return
	}
	ep.ensureDialLocked()
}
