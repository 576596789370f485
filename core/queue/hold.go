package queue

// Engine primitives a repartition is driven with (S-123, S-124): a
// delivery hold on a partition, the drain of the offsets below a cutover,
// and the partition's end, where a cutover is read. Whoever drives the
// transition (the cluster's coordination) keeps its own durable record of
// it; the engine keeps none (see SetHold).

// SetHold stops deliveries of the messages at offsets >= from until
// ReleaseHold (or a SetHold with a higher from): they are not handed to
// any subscription, not browsed as ready (StateHeld) and not requeued
// into delivery when a lease runs out or a retry is due — they wait in
// Ready. Messages below from are delivered as usual. Publishes append and
// confirm as before: a held message is durable, only not delivered.
// Delays (not_before, retry delays) and TTL expiry still apply to held
// messages: a delayed one is delivered only once its delay is over and
// the hold is lifted; an expired one is removed as usual (S-40). Lowering
// from takes back nothing already delivered.
//
// The hold lives in memory only: a restart, a failover or Manager.Release
// forgets it. Options.Holds applies it again when the engine opens the
// partition, before the partition can deliver anything.
func (p *Partition) SetHold(from uint64) {
	p.mu.Lock()
	raised := from > p.holdFrom
	p.holdFrom = from
	if raised {
		p.dispatchLocked()
	}
	p.finishLocked()
}

// ReleaseHold lifts the hold and delivers at once what it held back.
func (p *Partition) ReleaseHold() { p.SetHold(Unlimited) }

// Hold reports the partition's hold: its first held offset, and whether
// there is one.
func (p *Partition) Hold() (from uint64, held bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.holdFrom == Unlimited {
		return 0, false
	}
	return p.holdFrom, true
}

// End returns the offset the next message published to the partition
// will get: every message published so far lies below it (a repartition's
// cutover offset).
func (p *Partition) End() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.end
}
