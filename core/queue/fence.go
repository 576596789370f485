package queue

import (
	"errors"
	"math"
)

// The partitioning fence in the engine (S-118, docs/repartition.md): the
// session checks a publish's partitioning version before it stores it,
// but only the check made here, under the partition's lock (the lock that
// hands out offsets), makes a cutover offset exact. Once the queue's
// version is raised, every append that takes the lock refuses an older
// version, so Cutover, taking the same lock after the raise, reads an end
// below which every message was routed by the old layout.
//
// A producer can learn the new layout before this broker does (from a
// broker whose view is ahead) and publish by it while this partition's
// queue still has the old version. Such a message passes (a newer version
// always does, S-118), and the partition remembers the first offset one
// took, by the version it was routed by: the cutover is then that offset,
// so a message of the new layout never counts as part of the old backlog.
// A note is for the transition to its version only. A grow's new
// partitions are no sources of the grow, so nothing asks them for its
// cutover, and what they noted then is old backlog by the time the next
// transition asks them.

// fenceNone marks an append no producer routed (a dead letter's copy).
const fenceNone = math.MaxUint64

// ErrStalePartitioning is returned by Publish for a message routed by an
// older partitioning version than the queue's: the caller answers with a
// REDIRECT carrying PartitioningVersion (S-118).
var ErrStalePartitioning = errors.New("routed by an older partitioning version")

// PartitioningVersion is the partitioning version of the partition's queue
// (docs/protocol.md#topology): 0 until a repartition raises it (in a
// cluster only, S-122). Read on every publish, so straight from the
// queue's settings, not through its whole QueueInfo.
func (p *Partition) PartitioningVersion() uint64 { return p.q.cfg.Load().version }

// fenceLocked refuses version when it is below the queue's. Caller holds
// p.mu.
func (p *Partition) fenceLocked(version uint64) error {
	if version != fenceNone && version < p.PartitioningVersion() {
		return ErrStalePartitioning
	}
	return nil
}

// noteNewerLocked remembers off as the first offset routed by version
// when that is newer than the queue's partitioning version (see above).
// Caller holds p.mu.
func (p *Partition) noteNewerLocked(version, off uint64) {
	if version == fenceNone || version <= p.PartitioningVersion() {
		return
	}
	if _, ok := p.firstNewer[version]; !ok {
		p.firstNewer[version] = off
	}
}

// Cutover returns the partition's cutover offset: its end, read under
// the lock every append takes, or the first offset a message routed by
// the queue's version (or a later one) took before the raise, if lower.
// Call it after the queue's partitioning version was raised (ApplyQueue,
// GrowQueue or ShrinkQueue). It forgets the notes of that version and of
// earlier ones. With hold, deliveries from that offset on are held in the
// same step (a shrink's survivor, whose new messages wait for its merge
// sources), so that no message of the new layout is handed out in
// between.
func (p *Partition) Cutover(hold bool) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	cut, version := p.end, p.PartitioningVersion()
	for v, off := range p.firstNewer {
		if v >= version {
			cut = min(cut, off)
		}
		if v <= version {
			delete(p.firstNewer, v)
		}
	}
	if hold && cut < p.holdFrom {
		p.holdFrom = cut
	}
	return cut
}

// PartitioningVersion of a stream partition is always 0: streams are
// never repartitioned (docs/repartition.md).
func (sp *StreamPartition) PartitioningVersion() uint64 { return 0 }
