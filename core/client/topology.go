package client

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/wire"
)

// Topology is a snapshot of the broker's routing table (wire.Topology, docs/protocol.md#topology).
type Topology struct {
	Generation uint64
	Queues     []PartitionInfo
	Streams    []PartitionInfo
}

// PartitionInfo is one queue or stream partition of a Topology. Group is
// "" for the default namespace and for streams.
type PartitionInfo struct {
	Topic               string
	Group               string
	Partition           uint32
	Owners              []string // host:port in priority order; empty = unknown
	PartitioningVersion uint64
	PartitionCount      uint32
}

// routeKey identifies a queue partition (topic, partition, group); streams
// use an absent group.
type routeKey struct {
	topic     string
	partition uint32
	group     wire.Option[string]
}

// countKey identifies a queue (topic, group) or a stream (topic, absent).
type countKey struct {
	topic string
	group wire.Option[string]
}

type countInfo struct {
	n       uint32
	version uint64
}

// topoCache is the client's routing cache (docs/protocol.md#topology, S-115): the first owner
// endpoint of every partition that is not tagged private, and the partition count and
// partitioning version of every queue and stream. With
// Options.PreferPrivateEndpoints it also keeps each partition's first
// endpoint tagged private (docs/protocol.md#endpoints), used while it
// answers.
type topoCache struct {
	mu     sync.Mutex
	gen    uint64
	owners map[routeKey]string
	counts map[countKey]countInfo
	listed map[routeKey]bool // every partition with an entry, owned or not
	// preferPrivate is Options.PreferPrivateEndpoints; private holds the
	// first endpoint tagged private of the partitions that have one (only
	// with preferPrivate), and avoid the private endpoints that did not
	// answer, with the time until which they are avoided
	// (Options.PrivateRetryAfter, retryPrivate).
	preferPrivate bool
	retryPrivate  time.Duration
	private       map[routeKey]string
	avoid         map[string]time.Time
}

func newTopoCache() *topoCache {
	return &topoCache{owners: make(map[routeKey]string), counts: make(map[countKey]countInfo), listed: make(map[routeKey]bool),
		private: make(map[routeKey]string), avoid: make(map[string]time.Time)}
}

// preferPrivateEndpoints turns on the private route (Options.PreferPrivateEndpoints).
func (t *topoCache) preferPrivateEndpoints(retry time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.preferPrivate, t.retryPrivate = true, retry
}

// apply installs a snapshot. A full snapshot replaces the cache; a
// filtered one (TOPOLOGY with a topic) replaces only that topic's entries
// (and only that group's queue entries when group is present). A snapshot
// older than the cached generation is ignored (S-115). It returns the
// generation the cache now reflects and whether the snapshot was applied.
func (t *topoCache) apply(w *wire.Topology, full bool, topic wire.Option[string], group wire.Option[string]) (uint64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if w.Generation < t.gen {
		return t.gen, false
	}
	t.gen = w.Generation
	if full || !topic.Present {
		clear(t.owners)
		clear(t.counts)
		clear(t.private)
		clear(t.listed)
	} else {
		// The refreshed queue's entries go; a refresh of a topic without a
		// group drops all its groups'.
		in := func(tp string, g wire.Option[string]) bool {
			return tp == topic.Value && (!group.Present || g == group)
		}
		inRoute := func(k routeKey, _ string) bool { return in(k.topic, k.group) }
		maps.DeleteFunc(t.owners, inRoute)
		maps.DeleteFunc(t.private, inRoute)
		maps.DeleteFunc(t.listed, func(k routeKey, _ bool) bool { return in(k.topic, k.group) })
		maps.DeleteFunc(t.counts, func(k countKey, _ countInfo) bool { return in(k.topic, k.group) })
	}
	for i := range w.Queues {
		e := &w.Queues[i]
		t.put(routeKey{e.Topic, e.Partition, e.Group}, e.Owners, e.PartitionCount, e.PartitioningVersion)
	}
	for i := range w.Streams {
		e := &w.Streams[i]
		t.put(routeKey{topic: e.Topic, partition: e.Partition}, e.Owners, e.PartitionCount, e.PartitioningVersion)
	}
	return t.gen, true
}

func (t *topoCache) put(k routeKey, owners []wire.AdvertisedAddress, n uint32, version uint64) {
	if a, ok := firstEndpoint(owners, false); ok {
		t.owners[k] = a
	}
	if a, ok := firstEndpoint(owners, true); ok && t.preferPrivate {
		t.private[k] = a
	}
	t.counts[countKey{k.topic, k.group}] = countInfo{n: n, version: version}
	t.listed[k] = true
}

// firstEndpoint is the first endpoint of an entry that is tagged private
// (private) or not (!private).
func firstEndpoint(owners []wire.AdvertisedAddress, private bool) (string, bool) {
	for _, o := range owners {
		if slices.Contains(o.Tags, core.TagPrivate) == private {
			return o.String(), true
		}
	}
	return "", false
}

// applyRedirect records the owner and partitioning version a REDIRECT
// named (docs/protocol.md#redirect). An empty endpoint list forgets the owner, so the next try
// goes to the bootstrap connection.
func (t *topoCache) applyRedirect(r *wire.Redirect) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := routeKey{r.Topic, r.Partition, r.Group}
	if a, ok := firstEndpoint(r.Owners, false); ok {
		t.owners[k] = a
	} else {
		delete(t.owners, k)
	}
	// The partition is elsewhere now: its private route, if any, is stale
	// until the next topology says otherwise.
	delete(t.private, k)
	ck := countKey{r.Topic, r.Group}
	ci := t.counts[ck]
	if r.PartitioningVersion > ci.version {
		ci.version = r.PartitioningVersion
		t.counts[ck] = ci
	}
}

// owner returns the cached owner of k ("" = unknown: use bootstrap): its
// private endpoint while it has one that is not avoided, else its first
// untagged one.
func (t *topoCache) owner(k routeKey) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ownerLocked(k)
}

func (t *topoCache) ownerLocked(k routeKey) string {
	if a := t.private[k]; a != "" && !t.avoidedLocked(a) {
		return a
	}
	return t.owners[k]
}

func (t *topoCache) avoidedLocked(addr string) bool {
	until, ok := t.avoid[addr]
	if ok && time.Now().After(until) {
		delete(t.avoid, addr)
		return false
	}
	return ok
}

// privateFailed records that addr did not answer or lost its connection.
// When addr is a private endpoint of the cache it is avoided for
// retryPrivate (its partitions route through their gateway meanwhile) and
// the answer is true.
func (t *topoCache) privateFailed(addr string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, a := range t.private {
		if a == addr {
			t.avoid[addr] = time.Now().Add(t.retryPrivate)
			return true
		}
	}
	return false
}

// count returns the partition count and partitioning version of a queue
// or stream; known is false when the cache has no entry (cold cache or a
// standalone broker, docs/protocol.md#publish, S-113).
func (t *topoCache) count(topic string, group wire.Option[string]) (n uint32, version uint64, known bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ci, ok := t.counts[countKey{topic, group}]
	return ci.n, ci.version, ok && ci.n > 0
}

// retired reports whether a shrink retired queue partition k (S-126): the
// cache knows the queue's count, k is past it, and either the topology no
// longer lists k or the broker answered 404 for it (notFound). During a
// shrink the count drops at the cutover while the retired partitions are
// still listed, and served, until they drain.
func (t *topoCache) retired(k routeKey, notFound bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	ci, ok := t.counts[countKey{k.topic, k.group}]
	return ok && ci.n > 0 && k.partition >= ci.n && (notFound || !t.listed[k])
}

// routesOf returns the distinct endpoints the listed partitions of the
// queues qs are routed to (owner), a repartition's placed but not yet cut
// over ones included.
func (t *topoCache) routesOf(qs map[countKey]bool) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	seen := map[string]bool{}
	var out []string
	for k := range t.listed {
		if !qs[countKey{k.topic, k.group}] {
			continue
		}
		if a := t.ownerLocked(k); a != "" && !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	return out
}

// ownedEndpoints is the set of endpoints that own at least one partition.
func (t *topoCache) ownedEndpoints() map[string]bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := make(map[string]bool, len(t.owners)+len(t.private))
	for _, a := range t.owners {
		m[a] = true
	}
	for _, a := range t.private {
		m[a] = true
	}
	return m
}

func fromWireTopology(w *wire.Topology) *Topology {
	out := &Topology{Generation: w.Generation}
	for _, e := range w.Queues {
		out.Queues = append(out.Queues, PartitionInfo{
			Topic: e.Topic, Group: e.Group.Value, Partition: e.Partition, Owners: addrs(e.Owners),
			PartitioningVersion: e.PartitioningVersion, PartitionCount: e.PartitionCount,
		})
	}
	for _, e := range w.Streams {
		out.Streams = append(out.Streams, PartitionInfo{
			Topic: e.Topic, Partition: e.Partition, Owners: addrs(e.Owners),
			PartitioningVersion: e.PartitioningVersion, PartitionCount: e.PartitionCount,
		})
	}
	return out
}

func addrs(eps []wire.AdvertisedAddress) []string {
	var out []string
	for _, a := range eps {
		out = append(out, a.String())
	}
	return out
}

// Topology fetches the topology from the bootstrap connection ("" = all
// topics), installs it in the routing cache and returns it. Pooled
// connections to endpoints that no longer own anything are closed.
func (c *Client) Topology(ctx context.Context, topic string) (*Topology, error) {
	w, err := c.fetchTopology(ctx, optStr(topic), wire.None[string]())
	if err != nil {
		return nil, err
	}
	return fromWireTopology(w), nil
}

func (c *Client) fetchTopology(ctx context.Context, topic, group wire.Option[string]) (*wire.Topology, error) {
	req := &wire.TopologyRequest{Topic: topic, Group: group}
	f, err := c.roundTrip(ctx, opSpec{op: wire.OpTopology, prepare: func() (*routeKey, wire.Encoder) { return nil, req }})
	if err != nil {
		return nil, err
	}
	var ok wire.TopologyOK
	if err := f.Decode(&ok); err != nil {
		return nil, protocolErrorf("malformed TOPOLOGY_OK: %v", err)
	}
	c.applyTopology(&ok.Topology, !topic.Present, topic, group)
	return &ok.Topology, nil
}

// refreshTopology re-fetches the entries of one queue, best effort (used
// after a 409, an owner move, or a REDIRECT with a newer partitioning
// version).
func (c *Client) refreshTopology(ctx context.Context, topic string, group wire.Option[string]) {
	if _, err := c.fetchTopology(ctx, wire.Some(topic), group); err != nil {
		c.log.Debug("topology refresh failed", "topic", topic, "err", err)
	}
}

// applyTopology installs a snapshot and retires pooled endpoints that own
// nothing any more. It returns the generation the cache reflects.
func (c *Client) applyTopology(w *wire.Topology, full bool, topic, group wire.Option[string]) uint64 {
	gen, applied := c.topo.apply(w, full, topic, group)
	if applied {
		c.afterApply()
	}
	return gen
}

// afterApply follows a change of the cache: it retires the pooled
// endpoints that own nothing any more, tells the subscriptions that
// follow a count, and dials the owners ahead of need (warm.go).
func (c *Client) afterApply() {
	c.pool.prune(c.topo.ownedEndpoints())
	c.topologyChanged()
	c.warmOwners()
}

// onTopologyUpdate applies a TOPOLOGY_UPDATE push and answers
// TOPOLOGY_UPDATE_ACK with the push's request id and the generation the
// cache now reflects (docs/protocol.md#topology).
func (c *Client) onTopologyUpdate(conn *Conn, f Frame) {
	var up wire.TopologyUpdate
	if err := f.Decode(&up); err != nil {
		c.stats.protocolViolations.Add(1)
		c.log.Warn("malformed TOPOLOGY_UPDATE", "err", err)
		return
	}
	gen, applied := c.topo.apply(&up.Topology, true, wire.None[string](), wire.None[string]())
	// Ack first: pruning may close this very connection.
	conn.sendControl(wire.OpTopologyUpdateAck, f.RequestID, &wire.TopologyUpdateAck{Generation: gen})
	if applied {
		c.afterApply()
	}
}

func optStr(s string) wire.Option[string] {
	if s == "" {
		return wire.None[string]()
	}
	return wire.Some(s)
}
