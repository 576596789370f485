package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fibrilgo/fibril/core/client"
)

// rttEvent is what the consumer goroutine reports for one delivery.
type rttEvent struct {
	seq      uint64
	received int64 // Now() when Next returned it
	acked    int64 // Now() when the ACK was written
}

// runRTT publishes one confirmed message at a time and, for each, waits
// for its confirm and for its delivery to be acked before the next:
//
//	confirm = PUBLISH_OK received − publish start
//	e2e     = delivery received − publish start
//	ack     = ACK written − delivery received
//	rtt     = max(PUBLISH_OK received, ACK written) − publish start
//
// Every instant is taken on the goroutine that saw the event (the
// consumer runs on its own goroutine and timestamps before handing the
// event over), so the handoff itself is not measured.
func (r *run) runRTT(ctx, setupCtx context.Context, res *Result) error {
	cfg := &r.cfg
	cons, err := r.dial(setupCtx, "rtt-consumer")
	if err != nil {
		return fmt.Errorf("connect consumer: %w", err)
	}
	sub, err := cons.Subscribe(setupCtx, cfg.Topic, client.SubscribeOptions{
		Group: cfg.Group, Partitions: r.parts, Prefetch: uint32(cfg.Prefetch), AutoAck: cfg.AutoAck,
	})
	if err != nil {
		return fmt.Errorf("subscribe: %w", err)
	}
	prod, err := r.dial(setupCtx, "rtt-producer")
	if err != nil {
		return fmt.Errorf("connect producer: %w", err)
	}
	pub := prod.Publisher(cfg.Topic, client.PublisherOptions{Group: cfg.Group})

	r.start = Now()
	r.warmEnd = r.start + int64(cfg.Warmup)
	r.stopAt = r.warmEnd + int64(cfg.Duration)

	events := make(chan rttEvent, 1024)
	consCtx, stopCons := context.WithCancel(context.Background())
	defer stopCons()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			d, err := sub.Next(consCtx)
			if err != nil {
				if consCtx.Err() != nil {
					return
				}
				r.nextErrs.Add(1)
				r.noteErr("consume", err)
				if sub.Err() != nil {
					return
				}
				continue
			}
			t := Now()
			s, first := r.onDelivery(d.Payload, t, nil)
			if !cfg.AutoAck {
				if err := d.Ack(consCtx); err != nil && consCtx.Err() == nil {
					r.ackErrs.Add(1)
					r.noteErr("ack", err)
				}
			}
			if first {
				select {
				case events <- rttEvent{seq: s.Seq, received: t, acked: Now()}:
				default: // the main loop gave up on it long ago
				}
			}
		}
	}()

	progStop, progDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(progDone)
		r.progress(progStop)
	}()

	var conf, e2e, ack, rtt Histogram
	var s0, s1 snapshot
	s0 = r.snap()
	r.cpu0 = processCPU()
	measuring := cfg.Warmup == 0
	buf := make([]byte, cfg.Size)
	var part uint32
	msg := client.Message{Partition: &part, Payload: buf}
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
			r.cpu0 = processCPU()
		}
		Stamp{Sent: t0, Run: r.runID, Producer: 0, Seq: seq}.Put(buf)
		part = r.parts[seq%uint64(len(r.parts))]
		r.sent.Add(1)
		_, err := pub.PublishConfirmed(pubCtx, msg)
		t1 := Now()
		if err != nil {
			r.pubErrs.Add(1)
			r.noteErr("publish", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		r.tr.Accept(0, seq)
		r.accepted.Add(1)
		// Wait for this message's delivery (bounded by the drain time).
		wait.Reset(cfg.Drain)
		var ev rttEvent
		got := false
	waitLoop:
		for !got {
			select {
			case ev = <-events:
				got = ev.seq == seq // older events belong to messages that timed out
			case <-wait.C:
				break waitLoop
			case <-ctx.Done():
				break waitLoop
			}
		}
		if !wait.Stop() {
			select {
			case <-wait.C:
			default:
			}
		}
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
	s1 = r.snap()
	r.cpu1 = processCPU()
	r.stop()
	close(progStop)
	<-progDone
	stopCons()
	sub.Close()
	wg.Wait()

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
