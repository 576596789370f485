package queue

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/clock"
	"github.com/fibrilgo/fibril/core/storage"
)

// Partition is one queue partition: the storage log plus the engine state
// that says which of its messages are ready, in flight, delayed or on
// their way to a dead-letter queue.
//
// Memory is independent of the backlog's size and payloads: messages never
// delivered are the log range [cursor, end) — no per-message state — and
// only messages that left that range and came back (requeued), wait for a
// time (delayed), expire (TTL heap), were retried, or are in flight have
// an entry somewhere. Payloads are read from the log when delivered.
//
// Every field below mu is guarded by it. A single mutex per partition is
// the whole locking story on the hot path: Consumer.Deliver runs under it
// (it must not block or call back), so a session that later acks from
// another goroutine simply takes the lock again.
type Partition struct {
	m     *Manager
	q     *queue
	index uint32
	name  string             // "orders/billing partition 2", for messages
	log   *storage.Partition // nil when the partition could not be opened

	counts partCounters // for the admin API (admin.go)

	broken atomic.Pointer[error] // quarantined or failed: every call answers it
	epoch  atomic.Uint64         // the assignment epoch the log's history ends with, once known (BeginEpoch)

	mu       sync.Mutex
	closed   bool // the manager is shutting down, or the partition was released
	released bool // Manager.Release: another broker owns it now
	retired  bool // Manager.ShrinkQueue removed it

	subs []*Subscription
	rr   int // round-robin position in subs (S-47)

	cursor    uint64 // offsets below it have left the never-delivered region
	end       uint64 // the next offset the engine will register (the log's next)
	unsettled uint64 // messages in [first, end) not settled

	requeued minHeap[uint64]     // ready offsets below cursor (lazy deletion: valid iff in inReq)
	inReq    map[uint64]struct{} //
	delayed  map[uint64]int64    // offset → not-before, unix ms
	delays   minHeap[due]        // (not-before, offset); valid iff delayed[off] == at
	ttl      minHeap[due]        // (deadline, offset) of unsettled messages with a TTL
	ttlLive  int                 // unsettled messages with a TTL (to prune settled entries)
	retries  map[uint64]uint32   // retry counts > 0 (engine state, journaled)
	inflight map[uint64]*inflight
	leases   minHeap[*inflight]
	pending  map[uint64]*dlqPending // dead-letter copies not yet durable in their target
	settling map[uint64]int64       // acked, journal write in progress (offset → TTL deadline)

	jobs      []dlqJob // dead-letter copies to start once mu is released
	autoAcked []uint64 // auto-ack deliveries of this dispatch round, settled together

	hotOff  uint64 // the record just published, kept for an immediate delivery
	hotData []byte

	gate        ConfirmGate // nil: confirms need this broker's fsync only
	deliverable uint64      // first deliveries stop below it (SetDeliverable)
	holdFrom    uint64      // no delivery at or past it (SetHold); Unlimited: no hold
	// firstNewer is, by partitioning version newer than the queue's was
	// then, the first offset a message routed by it took and when, until a
	// Cutover at that version or a later one (fence.go).
	firstNewer map[uint64]newerNote
	watches    []*settledWatch

	timer    clock.Timer
	timerAt  int64
	timerGen uint64

	compactAt    int64 // CompactState once the state journal is past this
	journalDirty bool  // a settle or state entry was written since the last check
	redispatchQ  bool  // a goroutine is queued to continue a long dispatch

	dlqMu      sync.Mutex // dead-letter results from storage commit goroutines
	dlqResults []dlqResult
	dlqDrain   bool
}

// inflight is one leased delivery (S-50).
type inflight struct {
	off      uint64
	tag      uint64
	sub      *Subscription
	lease    int64 // unix ms
	deadline int64 // TTL deadline, 0 = none
	idx      int   // position in the lease heap
}

func leaseLess(a, b *inflight) bool { return a.lease < b.lease }

func (m *Manager) openPartition(q *queue, n uint32) (*Partition, error) {
	p := &Partition{
		m:          m,
		q:          q,
		index:      n,
		name:       fmt.Sprintf("%s partition %d", q.key, n),
		inReq:      map[uint64]struct{}{},
		delayed:    map[uint64]int64{},
		retries:    map[uint64]uint32{},
		inflight:   map[uint64]*inflight{},
		pending:    map[uint64]*dlqPending{},
		settling:   map[uint64]int64{},
		holdFrom:   Unlimited,
		firstNewer: map[uint64]newerNote{},
	}
	p.requeued.less = offLess
	p.delays.less = dueLess
	p.ttl.less = dueLess
	p.leases.less = leaseLess
	p.leases.moved = func(x *inflight, i int) { x.idx = i }
	lg, err := storage.OpenPartition(partitionDir(m.opts.Dir, q.key, n), m.opts.Storage)
	if errors.Is(err, storage.ErrQuarantined) {
		p.quarantine(err)
		return p, nil
	}
	if err != nil {
		return nil, core.Errorf(core.ErrInternal, "open %s: %v", p.name, err)
	}
	p.log = lg
	if err := p.recover(); err != nil {
		if errors.Is(err, storage.ErrQuarantined) {
			p.quarantine(err)
			return p, nil
		}
		lg.Close()
		return nil, core.Errorf(core.ErrInternal, "recover %s: %v", p.name, err)
	}
	p.deliverable = Unlimited
	if m.opts.Holds != nil {
		if from, held := m.opts.Holds(q.key, n); held {
			p.holdFrom = from
		}
	}
	if m.opts.Gates != nil {
		p.deliverable = 0 // until the gate's owner says otherwise
		if p.gate = m.opts.Gates(p); p.gate == nil {
			p.deliverable = Unlimited
		}
	}
	p.mu.Lock()
	p.rearmLocked() // recovered delays and TTL deadlines need the timer
	p.mu.Unlock()
	return p, nil
}

// quarantine marks the partition as refusing to serve and reports it.
func (p *Partition) quarantine(cause error) error {
	err := core.Errorf(core.ErrInternal, "partition %s is quarantined: %v", p.name, cause)
	if p.broken.CompareAndSwap(nil, &err) {
		p.m.log.Error("queue: partition quarantined", "queue", p.q.key.String(), "partition", p.index, "err", cause)
		p.m.addQuarantine(p, cause)
	}
	return *p.broken.Load()
}

// brokenErr returns the error every call answers, or nil.
func (p *Partition) brokenErr() error {
	if e := p.broken.Load(); e != nil {
		return *e
	}
	return nil
}

// storageErr turns a storage error into one for the client (it goes on
// the wire verbatim).
func (p *Partition) storageErr(op string, err error) error {
	switch {
	case errors.Is(err, storage.ErrQuarantined):
		return p.quarantine(err)
	case errors.Is(err, storage.ErrClosed):
		return core.Errorf(core.ErrUnavailable, "%s: partition %s is closed (broker shutting down)", op, p.name)
	case errors.Is(err, storage.ErrTooLarge):
		return core.Errorf(core.ErrTooLarge, "%s: message too large for partition %s", op, p.name)
	case errors.Is(err, storage.ErrFailed):
		return core.Errorf(core.ErrInternal, "%s: partition %s stopped after a disk error and needs a broker restart: %v", op, p.name, err)
	}
	return core.Errorf(core.ErrInternal, "%s: partition %s: %v", op, p.name, err)
}

// logFault reports a storage failure on a path that has nobody to answer
// (acks, timers, dead-lettering).
func (p *Partition) logFault(op string, err error) {
	if errors.Is(err, storage.ErrClosed) {
		return // shutting down: what was not applied is redone after the restart
	}
	err = p.storageErr(op, err)
	p.m.log.Error("queue: storage failure", "queue", p.q.key.String(), "partition", p.index, "op", op, "err", err)
}

// usable answers the error that refuses new work. Caller holds mu.
func (p *Partition) usableLocked() error {
	if err := p.brokenErr(); err != nil {
		return err
	}
	if p.retired {
		return core.Errorf(core.ErrNotFound, "%s was retired by a repartition (the queue has fewer partitions now); ask for the topology again", p.name)
	}
	if p.released {
		return core.Errorf(core.ErrUnavailable, "%s is no longer served by this broker; ask for the topology again", p.name)
	}
	if p.closed {
		return errClosed()
	}
	return nil
}

// stop ends the engine side: no more timers, deliveries or dead-letter
// jobs. Storage stays open until closeStorage.
func (p *Partition) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	p.watches = nil // never called once closed (OnSettledBelow)
	p.timerGen++
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
}

func (p *Partition) closeStorage() error {
	if p.log == nil {
		return nil
	}
	err := p.log.Close()
	if errors.Is(err, storage.ErrClosed) {
		return nil
	}
	return err
}

// Depth counts the partition's unsettled messages by state.
func (p *Partition) Depth() Depth {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.depthLocked()
}

func (p *Partition) depthLocked() Depth {
	d := Depth{Inflight: uint64(len(p.inflight)), Delayed: uint64(len(p.delayed))}
	if busy := d.Inflight + d.Delayed + uint64(len(p.pending)+len(p.settling)); p.unsettled > busy {
		d.Ready = p.unsettled - busy
	}
	return d
}

// finishLocked ends every engine call that changed state: compact the
// state journal if due, re-arm the timer, release mu, then start the
// dead-letter copies collected under it (they publish to other
// partitions, so they never run under this one's lock).
func (p *Partition) finishLocked() {
	p.maybeCompactLocked()
	p.rearmLocked()
	if len(p.watches) > 0 {
		p.fireWatchesLocked()
	}
	jobs := p.jobs
	p.jobs = nil
	p.mu.Unlock()
	for _, j := range jobs {
		p.runDeadLetter(j)
	}
}

// rearmLocked keeps one timer armed at the earliest lease, delay or TTL
// deadline, and none at all when there is nothing to wait for (an idle
// partition holds no timer). The expiry worker never sleeps longer than
// ExpiryPollMin while something is pending (S-50).
func (p *Partition) rearmLocked() {
	next := int64(math.MaxInt64)
	if p.leases.Len() > 0 {
		next = p.leases.Peek().lease
	}
	if p.delays.Len() > 0 {
		next = min(next, p.delays.Peek().at)
	}
	if p.ttl.Len() > 0 {
		next = min(next, p.ttl.Peek().at)
	}
	_, lagEnd := p.lagHoldLocked()
	next = min(next, lagEnd)
	if next == math.MaxInt64 || p.closed || p.brokenErr() != nil {
		if p.timer != nil {
			p.timer.Stop()
			p.timer = nil
			p.timerGen++
		}
		return
	}
	if p.timer != nil && p.timerAt <= next {
		return
	}
	now := p.m.nowMs()
	if poll := p.m.settings().ExpiryPollMin.Milliseconds(); poll > 0 && next > now+poll {
		next = now + poll
		if p.timer != nil && p.timerAt <= next {
			return
		}
	}
	if p.timer != nil {
		p.timer.Stop()
	}
	p.timerGen++
	gen := p.timerGen
	p.timerAt = next
	p.timer = p.m.clock.AfterFunc(time.Duration(max(0, next-now))*time.Millisecond, func() { p.onTimer(gen) })
}

// onTimer is the partition's expiry worker pass: leases, delays, TTL.
func (p *Partition) onTimer(gen uint64) {
	p.mu.Lock()
	if gen != p.timerGen || p.closed {
		p.mu.Unlock()
		return
	}
	p.timer = nil
	now := p.m.nowMs()
	p.expireLeasesLocked(now)
	p.releaseDelaysLocked(now)
	p.expiryPassLocked(now)
	p.dispatchLocked()
	p.finishLocked()
}
