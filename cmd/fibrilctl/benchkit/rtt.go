package benchkit

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// rttEvent is what the consumer reports for one delivery.
type rttEvent struct {
	seq      uint64
	received int64 // Now() when the delivery was handed over
	acked    int64 // Now() when the ACK was written (handed to the connection)
}

// runRTT publishes one confirmed message at a time and, for each, waits
// for its confirm and for its delivery to be acked before the next:
//
//	confirm = confirm received − publish start
//	e2e     = delivery received − publish start
//	ack     = ACK written − delivery received
//	rtt     = max(confirm received, ACK written) − publish start
//
// Every instant is taken on the goroutine that saw the event (the
// consumer timestamps before handing the event over), so the handoff
// itself is not measured.
func (r *run) runRTT(ctx, setupCtx context.Context, res *Result) error {
	cfg := &r.cfg
	events := make(chan rttEvent, 1024)
	h := &Handler{Reporter: Reporter{r}, events: events}
	sub, err := r.d.Consumer(setupCtx, "rtt-consumer", h)
	if err != nil {
		return fmt.Errorf("rtt-consumer: %w", err)
	}
	closeSub := sync.OnceFunc(func() {
		r.consClosing.Store(true)
		sub.Close()
	})
	defer closeSub()
	pub, err := r.d.Producer(setupCtx, "rtt-producer")
	if err != nil {
		return fmt.Errorf("rtt-producer: %w", err)
	}

	r.schedule()
	warmEnd := r.warmEnd.Load()
	progStop, progDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(progDone)
		r.progress(progStop)
	}()

	var conf, e2e, ack, rtt Histogram
	s0 := r.snap()
	r.cpu0, r.srv0 = processCPU(), serverCPU(cfg.ServerPID)
	measuring := cfg.Warmup == 0
	slot := &Slot{Payload: newPayload(cfg.Size), rtt: make(chan error, 1)}
	wait := time.NewTimer(time.Hour)
	defer wait.Stop()
	pubCtx, cancelPub := r.publishContext()
	defer cancelPub()
	for seq := uint64(0); ctx.Err() == nil; seq++ {
		t0 := Now()
		if t0 >= r.stopAt || seq >= MaxSeq {
			break
		}
		if !measuring && t0 >= warmEnd {
			measuring = true
			s0 = r.snap()
			r.cpu0, r.srv0 = processCPU(), serverCPU(cfg.ServerPID)
		}
		Stamp{Sent: t0, Run: r.runID, Producer: 0, Seq: seq}.Put(slot.Payload)
		slot.Seq = seq
		r.sent.Add(1)
		pub.Publish(pubCtx, slot)
		err := <-slot.rtt
		t1 := Now()
		if err != nil {
			r.pubErrs.Add(1)
			r.noteErr("publish", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		r.tr.Accept(0, seq)
		r.accepted.Add(1)
		// Wait for this message's delivery, bounded by the drain time.
		wait.Reset(cfg.Drain)
		var ev rttEvent
		got, timedOut := false, false
		for !got && !timedOut {
			select {
			case ev = <-events:
				got = ev.seq == seq // older events belong to messages that timed out
			case <-wait.C:
				timedOut = true
			case <-ctx.Done():
				timedOut = true
			}
		}
		wait.Stop() // Go ≥ 1.23 timers: no stale tick survives Stop/Reset
		if !got {
			r.timeouts.Add(1)
			continue
		}
		if t0 >= warmEnd {
			conf.Record(t1 - t0)
			e2e.Record(ev.received - t0)
			ack.Record(ev.acked - ev.received)
			rtt.Record(max(t1, ev.acked) - t0)
		}
	}
	s1 := r.snap()
	r.cpu1, r.srv1 = processCPU(), serverCPU(cfg.ServerPID)
	r.gate.stop()
	close(progStop)
	<-progDone
	closeSub()

	r.fillLatencies(res, &conf, &e2e)
	a, l := summarize(&ack), summarize(&rtt)
	res.AckP50, res.AckP99 = a.p50, a.p99
	res.RTTP50, res.RTTP90, res.RTTP99, res.RTTP999, res.RTTMax, res.RTTMean = l.p50, l.p90, l.p99, l.p999, l.max, l.mean
	if el := float64(s1.t-s0.t) / 1e9; el > 0 {
		res.ElapsedS = round3(el)
		res.PublishMsgsPerSec = round1(float64(s1.accepted-s0.accepted) / el)
		res.DeliverMsgsPerSec = round1(float64(s1.delivered-s0.delivered) / el)
	}
	return nil
}
