package benchkit

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fake is an in-memory system: queues of one partition each, spread over
// the producers and consumers by the rules of spread.go (one queue by
// default, which every consumer competes on). It runs Run without a
// broker, both ways a Driver can publish (pipelined like Fibril's
// PublishAsync, blocking like jsbench's), and can lose, duplicate and
// inject messages to show that Run counts them.
type fake struct {
	pipelined  bool
	drop, dup  int64        // seq of producer 0 to confirm but not enqueue / enqueue twice (-1: none)
	foreign    bool         // enqueue one message that is not of this run
	orphan     int          // queue that no consumer subscribes to (-1: none)
	fenceEvery uint64       // > 0: every such message of producer 0 is marked Fenced
	fenced     atomic.Int64 // messages marked Fenced and accepted

	qs        []chan []byte
	cfg       Config
	consumers int // Consumer calls so far
	acks      atomic.Int64
	perQueue  []atomic.Int64 // messages enqueued on each queue
	pubs      []*fakePub
	named     bool
	fan       bool // every queue gets every message (fan-out); drop applies to queue 0 only
}

func newFake(pipelined bool) *fake { return newFakeQueues(pipelined, 1) }

func newFakeQueues(pipelined bool, queues int) *fake {
	f := &fake{pipelined: pipelined, drop: -1, dup: -1, orphan: -1, perQueue: make([]atomic.Int64, queues)}
	for range queues {
		f.qs = append(f.qs, make(chan []byte, 1024))
	}
	return f
}

func (f *fake) Setup(_ context.Context, cfg Config, _ *Reporter) error {
	f.cfg = cfg
	if f.foreign {
		f.qs[0] <- make([]byte, HeaderSize) // run id 0: never a run's
	}
	return nil
}

func (f *fake) Pipelined() bool { return f.pipelined }

func (f *fake) Producer(context.Context, string) (Publisher, error) {
	p := &fakePub{f: f}
	if f.pipelined {
		// One goroutine completes the publishes in order, as a client's
		// callback goroutine does: Done never runs concurrently.
		p.jobs = make(chan *Slot, 1024)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for s := range p.jobs {
				err := p.send(context.Background(), s)
				p.markFence(s, err)
				s.Done(err)
			}
		}()
	}
	f.pubs = append(f.pubs, p)
	return p, nil
}

type fakePub struct {
	f    *fake
	jobs chan *Slot
	wg   sync.WaitGroup
}

func (p *fakePub) Publish(ctx context.Context, s *Slot) {
	if p.jobs != nil {
		p.jobs <- s
		return
	}
	s.Done(p.send(ctx, s))
}

// markFence marks the slot Fenced as a driver would, when the fake's
// fenceEvery picks it, and counts it once it is accepted.
func (p *fakePub) markFence(s *Slot, err error) {
	if n := p.f.fenceEvery; n > 0 && s.Producer == 0 && s.Seq%n == 0 {
		s.Fenced = true
		if err == nil {
			p.f.fenced.Add(1)
		}
	}
}

// send enqueues a copy of the payload (the slot is reused after Done).
func (p *fakePub) send(ctx context.Context, s *Slot) error {
	n := 1
	if s.Producer == 0 {
		switch int64(s.Seq) {
		case p.f.drop:
			n = 0
		case p.f.dup:
			n = 2
		}
	}
	if p.f.fan {
		for qi := range p.f.qs {
			copies := 1
			if qi == 0 {
				copies = n
			}
			p.f.perQueue[qi].Add(int64(copies))
			for range copies {
				select {
				case p.f.qs[qi] <- bytes.Clone(s.Payload):
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
		return nil
	}
	qi := TargetIndex(s.Producer, s.Seq, len(p.f.qs))
	p.f.perQueue[qi].Add(int64(n))
	for range n {
		select {
		case p.f.qs[qi] <- bytes.Clone(s.Payload):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Consumer takes its queues by ConsumerQueues, one goroutine each, and
// hands h one delivery at a time, as the Fibril driver does.
func (f *fake) Consumer(_ context.Context, _ string, h *Handler) (Subscription, error) {
	c := &fakeSub{stop: make(chan struct{})}
	idx := f.consumers
	f.consumers++
	var mu sync.Mutex
	for _, qi := range ConsumerQueues(idx, f.cfg.Consumers, len(f.qs)) {
		if qi == f.orphan {
			continue
		}
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			for {
				select {
				case p := <-f.qs[qi]:
					mu.Lock()
					h.Deliver(p, f)
					mu.Unlock()
				case <-c.stop:
					return
				}
			}
		}()
	}
	return c, nil
}

func (f *fake) Ack() error { f.acks.Add(1); return nil }

type fakeSub struct {
	stop chan struct{}
	wg   sync.WaitGroup
}

func (c *fakeSub) Close() { close(c.stop); c.wg.Wait() }

func (f *fake) Finish(res *Result) {
	res.Target, res.CountsNote = "fake", "  (fake note)"
	f.named = true
}

func (f *fake) Close() {
	for _, p := range f.pubs {
		if p.jobs != nil {
			close(p.jobs)
			p.wg.Wait()
		}
	}
}

func TestRunCountsEveryMessage(t *testing.T) {
	base := Config{Size: 64, Producers: 2, Consumers: 2, Window: 8, Confirmed: true,
		Duration: 300 * time.Millisecond, Warmup: 50 * time.Millisecond, Drain: 5 * time.Second}
	with := func(f func(*Config)) Config { c := base; f(&c); return c }
	for _, tc := range []struct {
		name      string
		cfg       Config
		pipelined bool
	}{
		{"pipelined", with(func(c *Config) { c.MaxAhead = 64 }), true},
		{"blocking", base, false},
		{"fire-and-forget", with(func(c *Config) { c.Confirmed = false }), true},
		{"auto-ack", with(func(c *Config) { c.AutoAck = true }), false},
		{"paced", with(func(c *Config) { c.Rate = 2000; c.Warmup = 0 }), true},
		{"rtt", with(func(c *Config) { c.Mode = ModeRTT }), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(tc.pipelined)
			res, err := Run(context.Background(), tc.cfg, f)
			if err != nil {
				t.Fatal(err)
			}
			if !f.named || res.Target != "fake" {
				t.Fatal("Finish was not called")
			}
			cfg := res.Confirmed
			if res.Sent == 0 || res.Delivered != res.Sent || (cfg && res.ConfirmedN != res.Sent) || !res.LossChecked ||
				res.Lost+res.Duplicates+res.Foreign+res.PublishErrors+res.AckErrors+res.ConsumeErrors+res.Timeouts != 0 {
				t.Fatalf("counts: %+v", res)
			}
			if want := int64(res.Delivered); tc.cfg.AutoAck {
				if f.acks.Load() != 0 {
					t.Fatalf("%d acks with --auto-ack", f.acks.Load())
				}
			} else if f.acks.Load() != want {
				t.Fatalf("%d acks for %d deliveries", f.acks.Load(), want)
			}
			if res.MsgsPerSec <= 0 || res.ElapsedS <= 0 || res.E2EN == 0 || res.E2EP50 > res.E2EP99 {
				t.Fatalf("rates and e2e: %+v", res)
			}
			if cfg && (res.ConfirmN == 0 || res.ConfirmN > res.ConfirmedN) {
				t.Fatalf("confirm samples %d of %d confirmed", res.ConfirmN, res.ConfirmedN)
			}
			switch tc.name {
			case "paced": // 2000/s for 0.3 s, scheduled before the stop instant
				if res.Sent < 550 || res.Sent > 600 {
					t.Fatalf("paced: sent %d, want ≈ 600", res.Sent)
				}
				// Measured from the actual send, a confirm cannot take longer
				// than measured from the scheduled one.
				if res.ConfirmFromSendP50 <= 0 || res.ConfirmFromSendP99 > res.ConfirmP99 || res.ConfirmFromSendP50 > res.ConfirmP50 {
					t.Fatalf("paced: confirm from send p50 %.1f p99 %.1f, from schedule p50 %.1f p99 %.1f",
						res.ConfirmFromSendP50, res.ConfirmFromSendP99, res.ConfirmP50, res.ConfirmP99)
				}
				if res.E2EFromSendP50 <= 0 || res.E2EFromSendP99 > res.E2EP99 || res.E2EFromSendP50 > res.E2EP50 {
					t.Fatalf("paced: publish→deliver from send p50 %.1f p99 %.1f, from schedule p50 %.1f p99 %.1f",
						res.E2EFromSendP50, res.E2EFromSendP99, res.E2EP50, res.E2EP99)
				}
			case "rtt":
				if res.Producers != 1 || res.Consumers != 1 || res.Window != 1 || res.RTTP50 < res.ConfirmP50 || res.RTTP50 < res.E2EP50 {
					t.Fatalf("rtt: %+v", res)
				}
			}
		})
	}
}

func TestRunFindsLossDuplicatesAndForeign(t *testing.T) {
	f := newFake(true)
	f.drop, f.dup, f.foreign = 3, 5, true
	cfg := Config{Size: HeaderSize, Producers: 1, Consumers: 1, Window: 4, Confirmed: true,
		Duration: 200 * time.Millisecond, Drain: 300 * time.Millisecond}
	res, err := Run(context.Background(), cfg, f)
	if err != nil {
		t.Fatal(err)
	}
	if res.Lost != 1 || res.Duplicates != 1 || res.Foreign != 1 || res.Delivered != res.ConfirmedN-1 {
		t.Fatalf("lost %d duplicates %d foreign %d, delivered %d of %d confirmed",
			res.Lost, res.Duplicates, res.Foreign, res.Delivered, res.ConfirmedN)
	}
	var table strings.Builder
	res.WriteTable(&table)
	for _, want := range []string{`(?m)^target +fake$`, `lost 1  duplicates 1  foreign 1  \(fake note\)`, `(?m)^  publish→deliver +\d`} {
		if !regexp.MustCompile(want).MatchString(table.String()) {
			t.Errorf("table lacks %s:\n%s", want, table.String())
		}
	}
}

// TestRunAcrossQueues spreads the messages over several queues, with
// fewer and with more consumers than queues: every message is counted
// once wherever it went, every queue got its share, and a queue no
// consumer reads shows as lost.
func TestRunAcrossQueues(t *testing.T) {
	for _, tc := range []struct {
		name              string
		queues, consumers int
		orphan            int
	}{
		{"more queues", 5, 2, -1},
		{"more consumers", 2, 3, -1},
		{"orphan queue", 3, 3, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeQueues(true, tc.queues)
			f.orphan = tc.orphan
			cfg := Config{Size: 64, Producers: 2, Consumers: tc.consumers, Window: 8, Confirmed: true,
				Duration: 200 * time.Millisecond, Drain: 2 * time.Second}
			if tc.orphan >= 0 {
				// Paced, so the unread queue never fills (its channel
				// holds 1024); the drain runs to its end, since that
				// queue never empties.
				cfg.Rate, cfg.Drain = 2000, time.Second
			}
			res, err := Run(context.Background(), cfg, f)
			if err != nil {
				t.Fatal(err)
			}
			var perQueue []int64
			for i := range f.perQueue {
				perQueue = append(perQueue, f.perQueue[i].Load())
			}
			// Round robin: the queues' shares differ by at most one
			// message per producer.
			if lo, hi := slices.Min(perQueue), slices.Max(perQueue); lo == 0 || hi-lo > int64(cfg.Producers) {
				t.Fatalf("messages per queue %v", perQueue)
			}
			if tc.orphan < 0 {
				if res.Sent == 0 || res.Delivered != res.Sent || res.ConfirmedN != res.Sent || res.Lost+res.Duplicates+res.Foreign != 0 {
					t.Fatalf("counts: %+v", res)
				}
				return
			}
			if res.Lost != uint64(perQueue[tc.orphan]) || res.Delivered+res.Lost != res.ConfirmedN || res.Duplicates != 0 {
				t.Fatalf("lost %d (orphan queue got %d), delivered %d of %d confirmed",
					res.Lost, perQueue[tc.orphan], res.Delivered, res.ConfirmedN)
			}
		})
	}
}

// TestResultJSONNames pins the field names that integration/bench
// (compare.sh, benchsum) and users' scripts read.
func TestResultJSONNames(t *testing.T) {
	res := &Result{SendLagP99: 1, RTTP50: 1, RTTP99: 1, AckP50: 1, LoadAvgStart: "0 0 0", Timeouts: 1,
		FenceN: 1, FenceP50: 1, FenceP99: 1, FenceMax: 1,
		ErrorSamples: []string{"x"}, ClientStats: map[string]uint64{"reconnects": 1}, Interrupted: true}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"mode", "addr", "topic", "queues", "partitions", "size", "producers", "consumers", "window",
		"confirm_mode", "prefetch", "auto_ack", "duration_s", "warmup_s", "drain_s", "rate", "max_ahead", "coalesce",
		"interrupted", "elapsed_s", "msgs_per_sec", "mb_per_sec", "publish_msgs_per_sec", "deliver_msgs_per_sec",
		"sent", "confirmed", "delivered", "lost", "duplicates", "loss_checked", "delivered_unconfirmed", "foreign",
		"publish_errors", "ack_errors", "consume_errors", "timeouts", "error_samples",
		"confirm_p50_us", "confirm_p99_us", "confirm_p999_us", "confirm_samples",
		"e2e_p50_us", "e2e_p99_us", "e2e_p999_us", "e2e_samples", "send_lag_p99_us",
		"ack_p50_us", "rtt_p50_us", "rtt_p99_us", "loadavg_start", "cpu_pressure_pct", "io_pressure_pct",
		"client_stats", "cpu_user_s", "cpu_sys_s", "cpu_per_msg_us", "server_cpu_s", "server_cpu_per_msg_us",
		"fence_samples", "fence_confirm_p50_us", "fence_confirm_p99_us", "fence_confirm_max_us"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks %q", k)
		}
	}
	for _, k := range []string{"Target", "CountsNote"} {
		if _, ok := m[k]; ok {
			t.Errorf("JSON has the table-only field %q", k)
		}
	}
}

// With fan-out every consumer must receive every message: deliveries are
// counted over all consumers, and a message one consumer missed is lost
// even though the others got it.
func TestRunFanOut(t *testing.T) {
	for _, drop := range []int64{-1, 5} {
		f := newFakeQueues(true, 3)
		f.fan, f.drop = true, drop
		cfg := Config{Size: 64, Producers: 1, Consumers: 3, Window: 8, Confirmed: true, FanOut: true,
			Duration: 200 * time.Millisecond, Drain: 2 * time.Second}
		res, err := Run(context.Background(), cfg, f)
		if err != nil {
			t.Fatal(err)
		}
		wantLost := uint64(0)
		if drop >= 0 {
			wantLost = 1
		}
		if res.Sent == 0 || res.Delivered != 3*res.ConfirmedN-wantLost || res.Lost != wantLost || res.Duplicates != 0 {
			t.Fatalf("drop %d: sent %d confirmed %d delivered %d lost %d duplicates %d", drop, res.Sent, res.ConfirmedN, res.Delivered, res.Lost, res.Duplicates)
		}
	}
	if err := (&Config{Size: 64, FanOut: true, MaxAhead: 10}).Validate(); err == nil {
		t.Fatal("--max-ahead with fan-out was accepted")
	}
}

// The confirms of publishes the driver marks Fenced are recorded apart as
// well (the pause at a repartition fence), every one of them.
func TestRunRecordsFencedConfirms(t *testing.T) {
	f := newFake(true)
	f.fenceEvery = 7
	res, err := Run(context.Background(), Config{Size: 64, Producers: 2, Consumers: 1, Window: 8, Confirmed: true,
		Duration: 200 * time.Millisecond, Warmup: 50 * time.Millisecond, Drain: 5 * time.Second}, f)
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(f.fenced.Load()); want == 0 || res.FenceN != want {
		t.Fatalf("fence samples %d, want %d (marked and confirmed)", res.FenceN, want)
	}
	if res.FenceP50 <= 0 || res.FenceP50 > res.FenceP99 || res.FenceP99 > res.FenceMax {
		t.Fatalf("fence p50 %.1f p99 %.1f max %.1f", res.FenceP50, res.FenceP99, res.FenceMax)
	}
}
