package queue

import (
	"errors"
	"math"
	"time"
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
//
// Until this broker's queue has the newer version, such a message and
// every one after it is not delivered either (the lag hold,
// heldFromLocked): this partition may turn out to be a shrink's survivor,
// whose messages of the new layout wait for its merge sources, and only
// the raise tells — the broker puts the transition's own hold in place
// before it gives the engine the raised version (core/broker, holdAhead),
// and the cutover then holds exactly from the note. Delivered at once, the
// message could overtake an older message of its key still waiting in a
// merge source. A version that no raise reaches within lagHoldLimit (a
// confused or hostile producer: a newer version always passes, S-118)
// holds nothing after that.

// lagHoldLimit bounds a lag hold: a broker that lags behind the cluster
// catches up within a view or two, well below it.
const lagHoldLimit = 5 * time.Second

// newerNote is where and when the first message routed by a newer
// partitioning version went.
type newerNote struct {
	off uint64
	at  int64 // unix ms
}

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
		p.firstNewer[version] = newerNote{off: off, at: p.m.nowMs()}
	}
}

// heldFromLocked is the first offset not to deliver: the hold (SetHold),
// or the first offset of a lag hold, if lower. Caller holds p.mu.
func (p *Partition) heldFromLocked() uint64 {
	lag, _ := p.lagHoldLocked()
	return min(p.holdFrom, lag)
}

// lagHoldLocked reports the partition's running lag holds: the first
// offset they keep back (Unlimited without one), and when the first of
// them runs out (unix ms; the timer delivers then what it kept back;
// math.MaxInt64 without one). Caller holds p.mu.
func (p *Partition) lagHoldLocked() (from uint64, end int64) {
	from, end = Unlimited, math.MaxInt64
	if len(p.firstNewer) == 0 {
		return from, end
	}
	version, now := p.PartitioningVersion(), p.m.nowMs()
	for v, n := range p.firstNewer {
		if t := n.at + lagHoldLimit.Milliseconds(); v > version && now < t {
			from, end = min(from, n.off), min(end, t)
		}
	}
	return from, end
}

// Cutover returns the partition's cutover offset: its end, read under
// the lock every append takes, or the first offset a message routed by
// the queue's version (or a later one) took before the raise, if lower.
// Call it after the queue's partitioning version was raised (ApplyQueue,
// GrowQueue or ShrinkQueue). It forgets the notes of that version and of
// earlier ones. With hold, deliveries from that offset on are held in the
// same step (a shrink's survivor, whose new messages wait for its merge
// sources), so that no message of the new layout is handed out in
// between. Without, what a lag hold kept back is delivered.
func (p *Partition) Cutover(hold bool) uint64 {
	p.mu.Lock()
	cut, version := p.end, p.PartitioningVersion()
	for v, n := range p.firstNewer {
		if v >= version {
			cut = min(cut, n.off)
		}
		if v <= version {
			delete(p.firstNewer, v)
		}
	}
	if hold && cut < p.holdFrom {
		p.holdFrom = cut
	}
	p.dispatchLocked()
	p.finishLocked()
	return cut
}

// PartitioningVersion of a stream partition is always 0: streams are
// never repartitioned (docs/repartition.md).
func (sp *StreamPartition) PartitioningVersion() uint64 { return 0 }
