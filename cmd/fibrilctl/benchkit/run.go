package benchkit

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

type run struct {
	cfg   Config
	d     Driver
	runID uint32
	tr    *Tracker
	gate  *gate

	start, stopAt int64        // Now() instants
	warmEnd       atomic.Int64 // Now() instant; read by handlers that may start before it is set
	interval      int64        // ns between two sends of one producer (--rate)

	sent, accepted, pubErrs, delivered, dups, foreign, ackErrs, consErrs, timeouts padded

	// consClosing is set before the subscriptions are closed: the errors
	// of acks cut short by it are not counted.
	consClosing atomic.Bool

	errMu   sync.Mutex
	errSeen map[string]int
	errKeys []string

	// CPU time of this process and of the server (--server-pid) at the
	// start and the end of the measured window.
	cpu0, cpu1, srv0, srv1 cpuTimes
}

func newRunID() uint32 {
	var b [4]byte
	for {
		_, _ = rand.Read(b[:])
		if id := binary.LittleEndian.Uint32(b[:]); id != 0 {
			return id
		}
	}
}

// noteErr counts an error message (at most 8 distinct ones are kept).
func (r *run) noteErr(what string, err error) {
	msg := what + ": " + err.Error()
	r.errMu.Lock()
	defer r.errMu.Unlock()
	if _, ok := r.errSeen[msg]; !ok {
		if len(r.errKeys) >= 8 {
			return
		}
		r.errKeys = append(r.errKeys, msg)
	}
	r.errSeen[msg]++
}

func (r *run) errorSamples() []string {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	out := make([]string, 0, len(r.errKeys))
	for _, k := range r.errKeys {
		out = append(out, fmt.Sprintf("%d× %s", r.errSeen[k], k))
	}
	return out
}

// Run executes one bench run against the system of d. Setup failures
// (connect, declare, subscribe) are returned as errors; failures during
// the run are counted in the Result. A run in which no publish was
// accepted (or, without producers, nothing was delivered) returns its
// Result together with an error.
func Run(ctx context.Context, cfg Config, d Driver) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &run{cfg: cfg, d: d, runID: newRunID(), errSeen: make(map[string]int)}
	defer d.Close()
	res := &Result{LoadAvgStart: loadAvg()}

	setupCtx, cancel := context.WithTimeout(ctx, setupBudget(cfg))
	defer cancel()
	if err := d.Setup(setupCtx, r.cfg, &Reporter{r}); err != nil {
		return nil, err
	}
	r.tr = NewTracker(r.cfg.Producers)
	if r.cfg.FanOut {
		r.tr = NewFanTracker(r.cfg.Producers, r.cfg.Consumers)
	}
	if r.cfg.Consumers == 0 && r.cfg.MaxAhead > 0 {
		fmt.Fprintln(r.cfg.Log, "warning: --max-ahead ignored without consumers")
		r.cfg.MaxAhead = 0
	}
	r.gate = newGate(r.cfg.MaxAhead, &r.delivered)

	var err error
	if r.cfg.Mode == ModeRTT {
		err = r.runRTT(ctx, setupCtx, res)
	} else {
		err = r.runThroughput(ctx, setupCtx, res)
	}
	if err != nil {
		return nil, err
	}
	r.fill(res)
	d.Finish(res)
	res.Interrupted = ctx.Err() != nil
	switch {
	case r.cfg.Producers > 0 && res.Sent > 0 && res.ConfirmedN == 0 && r.cfg.Confirmed:
		return res, errors.New("no publish was confirmed")
	case r.cfg.Producers > 0 && res.Sent == 0:
		return res, errors.New("nothing was published")
	case r.cfg.Producers == 0 && res.Delivered+res.Foreign == 0:
		return res, errors.New("nothing was delivered")
	}
	return res, nil
}

// schedule fixes the run's instants, starting now.
func (r *run) schedule() {
	r.start = Now()
	r.warmEnd.Store(r.start + int64(r.cfg.Warmup))
	r.stopAt = r.warmEnd.Load() + int64(r.cfg.Duration)
	if r.cfg.Rate > 0 && r.cfg.Producers > 0 {
		r.interval = max(1, int64(float64(time.Second)*float64(r.cfg.Producers)/r.cfg.Rate))
	}
}

// publishContext bounds the publishes: they may take until the end of
// the drain to be answered.
func (r *run) publishContext() (context.Context, context.CancelFunc) {
	return context.WithDeadline(context.Background(), epoch.Add(time.Duration(r.stopAt)+r.cfg.Drain))
}

type snapshot struct {
	t                         int64
	sent, accepted, delivered uint64
}

func (r *run) snap() snapshot {
	s := snapshot{t: Now(), sent: r.sent.Load(), accepted: r.accepted.Load(), delivered: r.delivered.Load()}
	if r.cfg.Producers == 0 {
		s.delivered += r.foreign.Load() // consume-only: every delivery counts
	}
	return s
}

// newPayload is a payload buffer: room for the stamp, then filler.
func newPayload(size int) []byte {
	buf := make([]byte, size)
	for i := HeaderSize; i < len(buf); i++ {
		buf[i] = byte(i)
	}
	return buf
}

// worker is one publishing goroutine of a producer with its slots: one
// worker with --window slots for a pipelined driver, else --window
// workers with one slot each.
type worker struct {
	r     *run
	pub   Publisher
	idx   uint32         // producer index
	seq   *atomic.Uint64 // the producer's next sequence number, shared by its workers
	ctx   context.Context
	free  chan *Slot
	n     int           // slots
	errs  atomic.Uint64 // failed publishes, to back off a failing system
	conf  *Histogram    // confirm latency, recorded by Done
	fence *Histogram    // confirm latency of the publishes that met a fence (Slot.Fenced), recorded by Done
	lag   *Histogram    // send lag (--rate only), recorded by the worker
	svc   *Histogram    // confirm latency from the actual send (--rate only), recorded by Done
}

func (r *run) runThroughput(ctx, setupCtx context.Context, res *Result) error {
	cfg := &r.cfg
	// Consumers first, so that nothing waits in the queue for them.
	var subs []Subscription
	closeSubs := func() {
		r.consClosing.Store(true)
		for _, s := range subs {
			s.Close()
		}
		subs = nil
	}
	defer func() { closeSubs() }()
	handlers := make([]*Handler, cfg.Consumers)
	for i := range handlers {
		h := &Handler{Reporter: Reporter{r}, consumer: i, e2e: new(Histogram)}
		if cfg.Rate > 0 {
			h.e2eAct = new(Histogram)
		}
		name := fmt.Sprintf("consumer-%d", i)
		sub, err := r.d.Consumer(setupCtx, name, h)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		subs = append(subs, sub)
		handlers[i] = h
	}
	perProducer, slots := 1, 1
	if cfg.Confirmed {
		if r.d.Pipelined() {
			slots = cfg.Window
		} else {
			perProducer = cfg.Window
		}
	}
	var workers []*worker
	for i := 0; i < cfg.Producers; i++ {
		name := fmt.Sprintf("producer-%d", i)
		pub, err := r.d.Producer(setupCtx, name)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		seq := new(atomic.Uint64)
		for range perProducer {
			w := &worker{r: r, pub: pub, idx: uint32(i), seq: seq, n: slots, conf: new(Histogram), fence: new(Histogram)}
			if cfg.Rate > 0 {
				w.lag, w.svc = new(Histogram), new(Histogram)
			}
			workers = append(workers, w)
		}
	}

	r.schedule()
	pubCtx, cancelPub := r.publishContext()
	defer cancelPub()
	var prodWG sync.WaitGroup
	for _, w := range workers {
		w.ctx = pubCtx
		prodWG.Add(1)
		go func() {
			defer prodWG.Done()
			r.publishLoop(w)
		}()
	}
	progDone := make(chan struct{})
	progStop := make(chan struct{})
	go func() {
		defer close(progDone)
		r.progress(progStop)
	}()

	// Measured window: from the end of the warmup to the stop instant.
	// (Interrupted during the warmup, both sleeps return at once and the
	// window is empty.)
	sleepUntil(ctx, r.warmEnd.Load())
	s0 := r.snap()
	r.cpu0, r.srv0 = processCPU(), serverCPU(cfg.ServerPID)
	if !sleepUntil(ctx, r.stopAt) {
		fmt.Fprintln(cfg.Log, "interrupted: stopping early")
	}
	s1 := r.snap()
	r.cpu1, r.srv1 = processCPU(), serverCPU(cfg.ServerPID)
	r.gate.stop()
	prodWG.Wait()

	// Drain: wait (bounded) for every accepted message to be delivered.
	// An interrupted run drains too (else its in-flight messages would
	// count as lost), for at most 2s.
	if cfg.Consumers > 0 && cfg.Producers > 0 {
		drain := cfg.Drain
		if ctx.Err() != nil {
			drain = min(drain, 2*time.Second)
		}
		deadline := Now() + int64(drain)
		for Now() < deadline {
			if r.delivered.Load() >= r.accepted.Load()*r.tr.Copies() && r.tr.Lost() == 0 {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	close(progStop)
	<-progDone
	closeSubs()

	// Merge the histograms: the handlers are done (Close), and so are the
	// workers' Done calls (every slot came back).
	var conf, fence, lag, svc, e2e, e2eAct Histogram
	for _, w := range workers {
		conf.Merge(w.conf)
		fence.Merge(w.fence)
		if w.lag != nil {
			lag.Merge(w.lag)
			svc.Merge(w.svc)
		}
	}
	for _, h := range handlers {
		e2e.Merge(h.e2e)
		if h.e2eAct != nil {
			e2eAct.Merge(h.e2eAct)
		}
	}
	r.fillLatencies(res, &conf, &e2e)
	if res.FenceN = fence.Count(); res.FenceN > 0 {
		f := summarize(&fence)
		res.FenceP50, res.FenceP99, res.FenceMax = f.p50, f.p99, f.max
	}
	if cfg.Rate > 0 {
		l := summarize(&lag)
		res.SendLagP50, res.SendLagP99, res.SendLagMax = l.p50, l.p99, l.max
		c := summarize(&svc)
		res.ConfirmFromSendP50, res.ConfirmFromSendP99 = c.p50, c.p99
		e := summarize(&e2eAct)
		res.E2EFromSendP50, res.E2EFromSendP99 = e.p50, e.p99
	}
	el := float64(s1.t-s0.t) / 1e9
	res.ElapsedS = round3(el)
	if el > 0 {
		if cfg.Confirmed {
			res.PublishMsgsPerSec = round1(float64(s1.accepted-s0.accepted) / el)
		} else {
			res.PublishMsgsPerSec = round1(float64(s1.sent-s0.sent) / el)
		}
		res.DeliverMsgsPerSec = round1(float64(s1.delivered-s0.delivered) / el)
	}
	return nil
}

// sleepUntil sleeps until the Now() instant t; false if ctx ended first.
func sleepUntil(ctx context.Context, t int64) bool {
	d := time.Duration(t - Now())
	if d <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// publishLoop drives one worker: each publish takes a free slot (waiting
// while all are in flight), and Done gives it back.
func (r *run) publishLoop(w *worker) {
	cfg := &r.cfg
	w.free = make(chan *Slot, w.n)
	for range w.n {
		w.free <- &Slot{Payload: newPayload(cfg.Size), Producer: w.idx, w: w}
	}
	defer func() {
		for range w.n { // every Done has come (the driver bounds them by ctx)
			<-w.free
		}
	}()
	warmEnd := r.warmEnd.Load()
	// Stagger the producers' schedules inside one interval.
	offset := r.interval * int64(w.idx) / int64(max(1, cfg.Producers))
	var seenErrs uint64
	for {
		if e := w.errs.Load(); e != seenErrs {
			seenErrs = e
			time.Sleep(10 * time.Millisecond) // do not spin on a failing system
		}
		if !r.gate.admit() {
			return
		}
		seq := w.seq.Add(1) - 1
		if seq >= MaxSeq {
			return
		}
		s := <-w.free
		var stamp int64
		if r.interval > 0 {
			stamp = r.start + int64(seq)*r.interval + offset
			if stamp >= r.stopAt {
				w.free <- s
				return
			}
			if d := stamp - Now(); d > 0 {
				time.Sleep(time.Duration(d))
			}
			s.sentAt = Now()
			if stamp >= warmEnd {
				w.lag.Record(s.sentAt - stamp)
			}
		} else {
			stamp = Now()
			if stamp >= r.stopAt {
				w.free <- s
				return
			}
			s.sentAt = stamp
		}
		Stamp{Sent: stamp, Run: r.runID, Producer: w.idx, Seq: seq, Actual: s.sentAt}.Put(s.Payload)
		s.Seq, s.stamp = seq, stamp
		r.sent.Add(1)
		w.pub.Publish(w.ctx, s)
	}
}

// done accounts for the outcome of a slot's publish and frees the slot.
func (w *worker) done(s *Slot, err error) {
	r := w.r
	if err != nil {
		r.pubErrs.Add(1)
		w.errs.Add(1)
		r.gate.release()
		if w.ctx.Err() == nil {
			r.noteErr("publish", err)
		}
		w.free <- s
		return
	}
	if r.cfg.Confirmed {
		t := Now()
		r.tr.Accept(s.Producer, s.Seq)
		r.accepted.Add(1)
		if s.Fenced {
			// Warmup included: a fence comes when it comes, and this
			// histogram holds only the publishes it held up.
			w.fence.Record(t - s.stamp)
			s.Fenced = false
		}
		if s.stamp >= r.warmEnd.Load() {
			w.conf.Record(t - s.stamp)
			if w.svc != nil {
				w.svc.Record(t - s.sentAt)
			}
		}
	} else {
		r.tr.Accept(s.Producer, s.Seq)
		r.accepted.Add(1)
	}
	w.free <- s
}

// onDelivery accounts for one delivered payload received at t and reports
// whether it was a first delivery of this run.
func (r *run) onDelivery(consumer int, payload []byte, t int64, e2e, e2eAct *Histogram) (Stamp, bool) {
	s, ok := ReadStamp(payload)
	switch {
	case !ok || s.Run != r.runID || !r.tr.Valid(s.Producer, s.Seq):
		r.foreign.Add(1)
		return s, false
	case r.tr.DeliverTo(consumer, s.Producer, s.Seq):
		r.dups.Add(1)
		return s, false
	}
	r.delivered.Add(1)
	r.gate.wake()
	if e2e != nil && s.Sent >= r.warmEnd.Load() {
		e2e.Record(t - s.Sent)
		if e2eAct != nil {
			e2eAct.Record(t - s.Actual)
		}
	}
	return s, true
}

func (r *run) progress(stop <-chan struct{}) {
	w := r.cfg.Progress
	tk := time.NewTicker(time.Second)
	defer tk.Stop()
	prev := r.snap()
	warmEnd := r.warmEnd.Load()
	for {
		select {
		case <-stop:
			return
		case <-tk.C:
		}
		// Safety net for the max-ahead gate (a wakeup is never needed here,
		// but a stalled producer costs a second at most).
		r.gate.broadcast()
		if w == nil {
			continue
		}
		s := r.snap()
		el := float64(s.t-prev.t) / 1e9
		phase := "run"
		switch {
		case s.t < warmEnd:
			phase = "warmup"
		case s.t >= r.stopAt:
			phase = "drain"
		}
		errs := r.pubErrs.Load() + r.ackErrs.Load() + r.consErrs.Load() + r.timeouts.Load()
		// in flight: handed to the client, not yet confirmed or failed;
		// ahead: sent − delivered, what --max-ahead bounds.
		fmt.Fprintf(w, "[%5.1fs %-6s] sent %d  confirmed %d  delivered %d | pub %.0f/s  del %.0f/s | in flight %d  ahead %d | errors %d\n",
			float64(s.t-r.start)/1e9, phase, s.sent, s.accepted, s.delivered,
			float64(s.accepted-prev.accepted)/el, float64(s.delivered-prev.delivered)/el,
			int64(s.sent-s.accepted-r.pubErrs.Load()), int64(s.sent-s.delivered), errs)
		prev = s
	}
}

func (r *run) fillLatencies(res *Result, conf, e2e *Histogram) {
	c := summarize(conf)
	res.ConfirmP50, res.ConfirmP90, res.ConfirmP99, res.ConfirmP999, res.ConfirmMax, res.ConfirmMean = c.p50, c.p90, c.p99, c.p999, c.max, c.mean
	res.ConfirmN = conf.Count()
	e := summarize(e2e)
	res.E2EP50, res.E2EP90, res.E2EP99, res.E2EP999, res.E2EMax, res.E2EMean = e.p50, e.p90, e.p99, e.p999, e.max, e.mean
	res.E2EN = e2e.Count()
}

// fill copies the parameters and the counters into res.
func (r *run) fill(res *Result) {
	cfg := &r.cfg
	res.Mode = cfg.Mode
	res.Size, res.Producers, res.Consumers = cfg.Size, cfg.Producers, cfg.Consumers
	res.Window, res.Confirmed, res.Prefetch, res.AutoAck = cfg.Window, cfg.Confirmed, cfg.Prefetch, cfg.AutoAck
	res.DurationS, res.WarmupS, res.DrainS = cfg.Duration.Seconds(), cfg.Warmup.Seconds(), cfg.Drain.Seconds()
	res.Rate, res.MaxAhead = cfg.Rate, cfg.MaxAhead

	res.Sent = r.sent.Load()
	if cfg.Confirmed {
		res.ConfirmedN = r.accepted.Load()
	}
	res.Delivered = r.delivered.Load()
	res.Duplicates = r.dups.Load()
	res.Foreign = r.foreign.Load()
	res.PublishErrors = r.pubErrs.Load()
	res.AckErrors = r.ackErrs.Load()
	res.ConsumeErrors = r.consErrs.Load()
	res.Timeouts = r.timeouts.Load()
	res.LossChecked = cfg.Consumers > 0 && cfg.Producers > 0
	if res.LossChecked {
		res.Lost = r.tr.Lost()
		res.DeliveredUnconfirmed = r.tr.DeliveredUnaccepted()
	}
	res.ErrorSamples = r.errorSamples()
	if cfg.Consumers > 0 {
		res.MsgsPerSec = res.DeliverMsgsPerSec
	} else {
		res.MsgsPerSec = res.PublishMsgsPerSec
	}
	res.MBPerSec = round3(res.MsgsPerSec * float64(cfg.Size) / (1 << 20))
	if n := res.MsgsPerSec * res.ElapsedS; n > 0 && r.cpu0.ok && r.cpu1.ok {
		user, sys := r.cpu1.user-r.cpu0.user, r.cpu1.sys-r.cpu0.sys
		res.CPUUserS, res.CPUSysS = round3(user), round3(sys)
		res.CPUPerMsgUS = round3((user + sys) * 1e6 / n)
	}
	// The server's, per message published in the window (consume-only: per
	// message delivered).
	n := res.PublishMsgsPerSec * res.ElapsedS
	if cfg.Producers == 0 {
		n = res.MsgsPerSec * res.ElapsedS
	}
	if r.srv0.ok && r.srv1.ok {
		cpu := r.srv1.user - r.srv0.user + r.srv1.sys - r.srv0.sys
		res.ServerCPUS = round3(cpu)
		if n > 0 {
			res.ServerCPUPerMsgUS = round3(cpu * 1e6 / n)
		}
	}
	res.LoadAvgEnd = loadAvg()
	res.CPUPressure, res.IOPressure = pressure("cpu"), pressure("io")
}

// setupBudget bounds connecting, declaring and subscribing: 30s, plus
// 150ms per connection, since every login costs the broker one argon2
// verification of tens of milliseconds (it caches none by design) and a
// thousand producers connect one after another.
func setupBudget(cfg Config) time.Duration {
	return 30*time.Second + time.Duration(cfg.Producers+cfg.Consumers)*150*time.Millisecond
}
