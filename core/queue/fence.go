package queue

import (
	"errors"
	"math"

	"github.com/fibrilgo/fibril/core"
)

// The partitioning fence in the engine (S-118, docs/repartition.md): the
// session checks a publish's partitioning version before it stores it,
// but only the check made here, under the partition's lock (the lock that
// hands out offsets), makes a cutover offset exact. Once the queue's
// version is raised, every append that takes the lock refuses an older
// version, so Cutover, taking the same lock after the raise, reads an end
// below which every message was routed by the old layout and from which
// every one by the new.

// fenceNone marks an append no producer routed (a dead letter's copy).
const fenceNone = math.MaxUint64

// ErrStalePartitioning is returned by Publish for a message routed by an
// older partitioning version than the queue's: the caller answers with a
// REDIRECT carrying PartitioningVersion (S-118).
var ErrStalePartitioning = errors.New("routed by an older partitioning version")

// fenceLocked refuses version when it is below the queue's, or, while the
// partition awaits a cutover (ExpectCutover), above it: this broker has
// not adopted that version yet, and storing it now would put a message of
// the new layout below the cutover. Caller holds p.mu.
func (p *Partition) fenceLocked(version uint64) error {
	if version == fenceNone {
		return nil
	}
	cur := p.q.cfg.Load().version
	if version < cur {
		return ErrStalePartitioning
	}
	if p.awaitCutover && version > cur {
		return core.Errorf(core.ErrUnavailable, "partition %s: this broker has not adopted partitioning version %d yet; retry", p.name, version)
	}
	return nil
}

// ExpectCutover makes the partition refuse (503, retryable) a publish
// routed by a newer partitioning version than its queue's until Cutover:
// a repartition is in view and the owner has not raised the version yet.
func (p *Partition) ExpectCutover() {
	p.mu.Lock()
	p.awaitCutover = true
	p.mu.Unlock()
}

// Cutover returns the partition's cutover offset: its end, read under
// the lock every append takes. Call it after the queue's partitioning
// version was raised (ApplyQueue, GrowQueue or ShrinkQueue). With hold,
// deliveries from that offset on are held in the same step (a shrink's
// survivor, whose new messages wait for its merge sources), so that no
// message of the new layout is handed out in between. It ends
// ExpectCutover.
func (p *Partition) Cutover(hold bool) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.awaitCutover = false
	if hold && p.end < p.holdFrom {
		p.holdFrom = p.end
	}
	return p.end
}

// PartitioningVersion of a stream partition is always 0: streams are
// never repartitioned (docs/repartition.md).
func (sp *StreamPartition) PartitioningVersion() uint64 { return 0 }
