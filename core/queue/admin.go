package queue

import (
	"cmp"
	"slices"
	"sync/atomic"

	"github.com/fibrilgo/fibril/core"
)

// What the admin API shows of a partition, and the purge it offers
// (docs/admin.md#queues). The counters live beside the manager-wide ones
// and cost one atomic add each on the paths that already count.

// partCounters are one partition's cumulative counts since it was opened.
type partCounters struct {
	published    atomic.Uint64
	delivered    atomic.Uint64
	deadLettered atomic.Uint64
}

// ConsumerStat is one subscription on a queue partition.
type ConsumerStat struct {
	Prefetch  uint32 `json:"prefetch"`
	Unsettled int    `json:"unsettled"` // delivered, not yet settled
	AutoAck   bool   `json:"auto_ack,omitempty"`
	Standby   bool   `json:"standby,omitempty"` // a cohort member not assigned this partition (S-90)
	Paused    bool   `json:"paused,omitempty"`
}

// PartitionStats is a queue partition's state for the admin API.
type PartitionStats struct {
	Depth
	// Published, Delivered and DeadLettered count since this broker opened
	// the partition (a restart or a move starts them at zero).
	Published    uint64         `json:"published"`
	Delivered    uint64         `json:"delivered"`
	DeadLettered uint64         `json:"dead_lettered"`
	Consumers    []ConsumerStat `json:"consumers"`
	// Bytes is the log's size on disk (segments and journals).
	Bytes int64 `json:"bytes"`
	// First and Next bound the retained log: [First, Next).
	First uint64 `json:"first_offset"`
	Next  uint64 `json:"next_offset"`
}

// Stats snapshots the partition.
func (p *Partition) Stats() PartitionStats {
	p.mu.Lock()
	st := PartitionStats{Depth: p.depthLocked(), Consumers: make([]ConsumerStat, 0, len(p.subs))}
	for _, s := range p.subs {
		st.Consumers = append(st.Consumers, ConsumerStat{Prefetch: s.opts.Prefetch, Unsettled: len(s.held) + s.settling,
			AutoAck: s.opts.AutoAck, Standby: s.standby, Paused: s.paused})
	}
	p.mu.Unlock()
	st.Published = p.counts.published.Load()
	st.Delivered = p.counts.delivered.Load()
	st.DeadLettered = p.counts.deadLettered.Load()
	if p.log != nil {
		st.Bytes = p.log.Size()
		st.First, st.Next = p.log.Bounds()
	}
	return st
}

// Purge settles every message that is ready or delayed (acknowledged as
// if consumed: nothing is dead-lettered) and returns how many. Messages in
// flight stay until their consumer settles them or their lease runs out;
// one on its way to a dead-letter queue finishes that. A message not yet
// deliverable (its replication confirm outstanding) is left: it was not
// ready when the purge ran. The settlements are one journal write per
// purgeBatch messages and replicate like acknowledgements.
func (p *Partition) Purge() (uint64, error) {
	p.mu.Lock()
	if err := p.usableLocked(); err != nil {
		p.mu.Unlock()
		return 0, err
	}
	var offs []uint64
	for off := range p.inReq {
		offs = append(offs, off)
	}
	for off := range p.delayed {
		if p.pending[off] == nil {
			offs = append(offs, off)
		}
	}
	for off := p.cursor; off < min(p.end, p.deliverable); off++ {
		_, delayed := p.delayed[off]
		if !delayed && p.pending[off] == nil && p.inflight[off] == nil && !p.log.IsSettled(off) {
			offs = append(offs, off)
		}
	}
	n, err := p.dropLocked(offs)
	p.finishLocked()
	if err != nil {
		return n, p.storageErr("purge", err)
	}
	return n, nil
}

// Remove settles the given messages when they are ready or delayed (as
// Purge does for all of them) and returns the ones it removed; offsets
// in flight, on their way to a dead-letter queue, settled or past the end
// are left alone.
func (p *Partition) Remove(offsets []uint64) ([]uint64, error) {
	p.mu.Lock()
	if err := p.usableLocked(); err != nil {
		p.mu.Unlock()
		return nil, err
	}
	var offs []uint64
	for _, off := range offsets {
		_, settling := p.settling[off]
		if off < p.end && !settling && p.inflight[off] == nil && p.pending[off] == nil && !p.log.IsSettled(off) && !slices.Contains(offs, off) {
			offs = append(offs, off)
		}
	}
	n, err := p.dropLocked(offs)
	p.finishLocked()
	if err != nil {
		return offs[:n], p.storageErr("remove", err)
	}
	return offs, nil
}

// dropLocked settles offs, messages that are ready or delayed, in
// batches, and forgets them.
func (p *Partition) dropLocked(offs []uint64) (uint64, error) {
	var n uint64
	var err error
	for len(offs) > 0 && err == nil {
		batch := offs[:min(len(offs), purgeBatch)]
		offs = offs[len(batch):]
		if err = p.settleLocked("purge", batch); err != nil {
			break
		}
		for _, off := range batch {
			delete(p.inReq, off)
			delete(p.delayed, off)
			// The TTL heap keeps its entries (settled ones are skipped and
			// pruned), so goneLocked is told there is none.
			p.goneLocked(off, 0)
		}
		n += uint64(len(batch))
	}
	if n > 0 {
		p.ttl.Filter(func(e due) bool { return !p.log.IsSettled(e.off) })
		p.ttlLive = p.ttl.Len()
		p.m.stats.acked.Add(n)
	}
	return n, err
}

// purgeBatch bounds one purge journal entry.
const purgeBatch = 64 << 10

// StreamPartitionStats is a stream partition's state for the admin API.
type StreamPartitionStats struct {
	First       uint64            `json:"first_offset"`
	Next        uint64            `json:"next_offset"`
	Bytes       int64             `json:"bytes"`
	Published   uint64            `json:"published"`
	Delivered   uint64            `json:"delivered"`
	Subscribers int               `json:"subscribers"`
	Cursors     map[string]uint64 `json:"cursors"` // durable name → next offset it will be given
}

// Stats snapshots the stream partition.
func (p *StreamPartition) Stats() StreamPartitionStats {
	st := StreamPartitionStats{Bytes: p.log.Size(), Published: p.counts.published.Load(), Delivered: p.counts.delivered.Load()}
	st.First, st.Next = p.log.Bounds()
	p.mu.Lock()
	st.Subscribers = len(p.subs)
	st.Cursors = make(map[string]uint64, len(p.cursors))
	for n, c := range p.cursors {
		st.Cursors[n] = c
	}
	p.mu.Unlock()
	return st
}

// LocalPartition is one partition this broker has open, with its stats.
type LocalPartition struct {
	Key
	Kind      Kind
	Partition uint32
	Queue     *PartitionStats
	Stream    *StreamPartitionStats
}

// LocalStats reports every open partition of topic (every topic when
// topic is ""): the partitions this broker serves or has loaded. Closed
// and unopened ones are not in it.
func (m *Manager) LocalStats(topic string) []LocalPartition {
	var out []LocalPartition
	for _, q := range m.sortedQueues() {
		if topic != "" && q.key.Topic != topic {
			continue
		}
		for _, p := range q.opened() {
			st := p.Stats()
			out = append(out, LocalPartition{Key: q.key, Kind: KindQueue, Partition: p.index, Queue: &st})
		}
	}
	for _, sp := range m.openStreamPartitions(topic) {
		st := sp.Stats()
		out = append(out, LocalPartition{Key: Key{Topic: sp.info.Topic}, Kind: KindStream, Partition: sp.index, Stream: &st})
	}
	return out
}

// openStreamPartitions returns the open partitions of topic's stream
// (of every stream when topic is ""), sorted by topic then partition.
func (m *Manager) openStreamPartitions(topic string) []*StreamPartition {
	m.mu.Lock()
	var out []*StreamPartition
	for _, sp := range m.sparts {
		if topic == "" || sp.info.Topic == topic {
			out = append(out, sp)
		}
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b *StreamPartition) int {
		return cmp.Or(cmp.Compare(a.info.Topic, b.info.Topic), cmp.Compare(a.index, b.index))
	})
	return out
}

// PurgeQueue purges the open partitions of a queue that match (every one
// when match is nil) and returns the count per partition. A queue this
// broker does not know is ErrNotFound.
func (m *Manager) PurgeQueue(key Key, match func(partition uint32) bool) (map[uint32]uint64, error) {
	key = key.norm()
	v, ok := m.queues.Load(key)
	if !ok {
		return nil, core.Errorf(core.ErrNotFound, "queue %s not found", key)
	}
	out := map[uint32]uint64{}
	for _, p := range v.(*queue).opened() {
		if match != nil && !match(p.index) {
			continue
		}
		n, err := p.Purge()
		out[p.index] = n
		if err != nil {
			return out, err
		}
	}
	return out, nil
}
