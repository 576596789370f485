package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// rttEvent is what the consumer callback reports for one delivery.
type rttEvent struct {
	seq      uint64
	received int64 // Now() when the callback got it
	acked    int64 // Now() when Ack returned (the ACK handed to the connection)
}

// runRTT publishes one message at a time and, for each, waits for its
// PubAck and for its delivery to be acked before the next:
//
//	confirm = PubAck received − publish start
//	e2e     = delivery received − publish start
//	ack     = Ack returned − delivery received
//	rtt     = max(PubAck received, Ack returned) − publish start
//
// Each instant is taken on the goroutine that saw the event, as in
// `fibrilctl bench --mode rtt`.
func (r *run) runRTT(ctx, setupCtx context.Context, res *Result) error {
	cfg := &r.cfg
	events := make(chan rttEvent, 1024)
	cc, err := r.startConsumer(setupCtx, "rtt-consumer", func(m jetstream.Msg) {
		t := Now()
		s, first := r.onDelivery(m.Data(), t, nil)
		if !cfg.AutoAck {
			if err := m.Ack(); err != nil && !r.stopping.Load() {
				r.ackErrs.Add(1)
				r.noteErr("ack", err)
			}
		}
		if first {
			select {
			case events <- rttEvent{seq: s.Seq, received: t, acked: Now()}:
			default: // the publisher gave up on it long ago
			}
		}
	})
	if err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	stopCons := sync.OnceFunc(func() { stopConsumer(cc) })
	defer stopCons()
	nc, err := r.connect("rtt-producer")
	if err != nil {
		return fmt.Errorf("producer: %w", err)
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(30*time.Second))
	if err != nil {
		return err
	}

	r.start = Now()
	r.warmEnd = r.start + int64(cfg.Warmup)
	r.stopAt = r.warmEnd + int64(cfg.Duration)
	progStop, progDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(progDone)
		r.progress(progStop)
	}()

	var conf, e2e, ack, rtt Histogram
	s0 := r.snap()
	r.cpu0 = sampleCPU()
	measuring := cfg.Warmup == 0
	buf := make([]byte, cfg.Size)
	for i := HeaderSize; i < len(buf); i++ {
		buf[i] = byte(i)
	}
	wait := time.NewTimer(time.Hour)
	defer wait.Stop()
	pubCtx, cancelPub := context.WithDeadline(context.Background(), epoch.Add(time.Duration(r.stopAt)+cfg.Drain))
	defer cancelPub()
	for seq := uint64(0); ctx.Err() == nil; seq++ {
		t0 := Now()
		if t0 >= r.stopAt || seq >= MaxSeq {
			break
		}
		if !measuring && t0 >= r.warmEnd {
			measuring = true
			s0 = r.snap()
			r.cpu0 = sampleCPU()
		}
		Stamp{Sent: t0, Run: r.runID, Producer: 0, Seq: seq}.Put(buf)
		r.sent.Add(1)
		err := publishConfirmed(pubCtx, js, cfg.Subject, buf)
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
				got = ev.seq == seq // older events are of messages that timed out
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
		if t0 >= r.warmEnd {
			conf.Record(t1 - t0)
			e2e.Record(ev.received - t0)
			ack.Record(ev.acked - ev.received)
			rtt.Record(max(t1, ev.acked) - t0)
		}
	}
	s1 := r.snap()
	r.cpu1 = sampleCPU()
	r.stop()
	close(progStop)
	<-progDone
	stopCons()

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
