// Package bench is the load generator behind `fibrilctl bench`: paced or
// unpaced confirmed publishers, acking consumers, publish→deliver latency
// from a monotonic stamp carried in the payload, and exact loss and
// duplicate accounting.
package bench

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibrilgo/fibril/core/client"
)

// Modes.
const (
	ModeThroughput = "throughput"
	ModeRTT        = "rtt"
)

// Config describes a run. Zero values get the defaults of Defaults.
type Config struct {
	// Client holds the connection options (addresses, credentials, TLS).
	// Every producer and consumer dials its own Client, so each has its
	// own TCP connection.
	Client client.Options

	Topic      string
	Group      string
	Partitions int
	Size       int // payload bytes, ≥ HeaderSize
	Producers  int
	Consumers  int
	Window     int // confirmed publishes in flight per producer
	Confirmed  bool
	Prefetch   int
	AutoAck    bool
	Duration   time.Duration // measured part
	Warmup     time.Duration // before it, not measured
	Drain      time.Duration // bound on the wait for outstanding confirms and deliveries
	Rate       float64       // total offered msgs/s; 0 = unpaced (closed loop)
	MaxAhead   int64         // sent − delivered bound; 0 = none
	Mode       string

	// Progress receives one line per second while running (nil = none).
	Progress io.Writer
	// Log receives warnings (nil = Progress).
	Log io.Writer
}

// Validate fills defaults and checks the configuration.
func (c *Config) Validate() error {
	if c.Mode == "" {
		c.Mode = ModeThroughput
	}
	if c.Mode != ModeThroughput && c.Mode != ModeRTT {
		return fmt.Errorf("--mode must be throughput or rtt, not %q", c.Mode)
	}
	if c.Topic == "" {
		return errors.New("--topic is required")
	}
	if c.Partitions <= 0 {
		c.Partitions = 1
	}
	if c.Size < HeaderSize {
		return fmt.Errorf("--size must be at least %d bytes (the bench header)", HeaderSize)
	}
	if c.Window <= 0 {
		c.Window = 1
	}
	if c.Prefetch <= 0 {
		c.Prefetch = client.DefaultPrefetch
	}
	if c.Producers < 0 || c.Consumers < 0 {
		return errors.New("--producers and --consumers cannot be negative")
	}
	if c.Duration <= 0 {
		return errors.New("--duration must be positive")
	}
	if c.Warmup < 0 || c.Drain < 0 || c.Rate < 0 || c.MaxAhead < 0 {
		return errors.New("--warmup, --drain, --rate and --max-ahead cannot be negative")
	}
	if c.Drain == 0 {
		c.Drain = 10 * time.Second
	}
	if c.Mode == ModeRTT {
		c.Producers, c.Consumers, c.Window, c.Confirmed = 1, 1, 1, true
		c.Rate, c.MaxAhead = 0, 0
	}
	if c.Producers == 0 && c.Consumers == 0 {
		return errors.New("nothing to do: no producers and no consumers")
	}
	if c.Log == nil {
		c.Log = c.Progress
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	return nil
}

// padded keeps hot counters on their own cache lines.
type padded struct {
	atomic.Uint64
	_ [56]byte
}

type run struct {
	cfg   Config
	runID uint32
	parts []uint32
	tr    *Tracker

	start, warmEnd, stopAt int64 // Now() instants
	interval               int64 // ns between two sends of one producer (--rate)

	stopping atomic.Bool

	sent, accepted, pubErrs, delivered, dups, foreign, ackErrs, nextErrs, timeouts padded

	// max-ahead gate: admitted counts publishes let through; a producer
	// waits while admitted − delivered ≥ MaxAhead.
	admitted padded
	gateMu   sync.Mutex
	gateCond *sync.Cond
	waiting  atomic.Int32

	errMu   sync.Mutex
	errSeen map[string]int
	errKeys []string

	clients []*client.Client

	// Process CPU time at the start and the end of the measured window.
	cpu0, cpu1 cpuTimes
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

// noteErr counts an error message (at most a few distinct ones are kept).
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

func (r *run) dial(ctx context.Context, name string) (*client.Client, error) {
	opts := r.cfg.Client
	if opts.ClientName == "" {
		opts.ClientName = "fibrilctl-bench/" + name
	}
	c, err := client.Dial(ctx, opts)
	if err != nil {
		return nil, err
	}
	r.clients = append(r.clients, c)
	return c, nil
}

// Run executes one bench run. Setup failures (dial, declare, subscribe)
// are returned as errors; failures during the run are counted in the
// Result. A run in which no publish was accepted (or, without producers,
// nothing was delivered) returns its Result together with an error.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &run{cfg: cfg, runID: newRunID(), errSeen: make(map[string]int)}
	r.gateCond = sync.NewCond(&r.gateMu)
	defer func() {
		for _, c := range r.clients {
			c.Close()
		}
	}()
	res := &Result{LoadAvgStart: loadAvg()}

	// Declare the queue and fix the partition list: a standalone broker
	// lists no queue in TOPOLOGY, so partitions are always explicit.
	setupCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	admin, err := r.dial(setupCtx, "setup")
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	n, err := admin.DeclareQueue(setupCtx, client.QueueSpec{Topic: cfg.Topic, Group: cfg.Group, Partitions: uint32(cfg.Partitions)})
	if err != nil {
		return nil, fmt.Errorf("declare %s: %w", cfg.Topic, err)
	}
	if int(n) != cfg.Partitions && n > 0 {
		fmt.Fprintf(cfg.Log, "warning: queue %s already has %d partitions (asked for %d); using %d\n", cfg.Topic, n, cfg.Partitions, n)
		r.cfg.Partitions = int(n)
	}
	for i := 0; i < r.cfg.Partitions; i++ {
		r.parts = append(r.parts, uint32(i))
	}
	r.tr = NewTracker(r.cfg.Producers)
	if r.cfg.Consumers == 0 && r.cfg.MaxAhead > 0 {
		fmt.Fprintln(cfg.Log, "warning: --max-ahead ignored without consumers")
		r.cfg.MaxAhead = 0
	}

	if r.cfg.Mode == ModeRTT {
		err = r.runRTT(ctx, setupCtx, res)
	} else {
		err = r.runThroughput(ctx, setupCtx, res)
	}
	if err != nil {
		return nil, err
	}
	r.fill(res)
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

// producer is one publishing client, driven by one goroutine. Confirmed
// publishes go out with PublishAsync, at most --window in flight.
type producer struct {
	idx  uint32
	pub  *client.Publisher
	seq  uint64
	errs atomic.Uint64 // failed publishes, to back off a failing broker
	ctx  context.Context
	hist *Histogram // confirm latency, recorded by the client's callbacks
	lag  *Histogram // send lag (--rate), recorded by the producer goroutine
}

func (r *run) runThroughput(ctx, setupCtx context.Context, res *Result) error {
	cfg := &r.cfg
	// Consumers first, so that nothing waits in the queue for them.
	consCtx, stopConsumers := context.WithCancel(context.Background())
	defer stopConsumers()
	var consWG sync.WaitGroup
	e2e := make([]*Histogram, cfg.Consumers)
	var subs []*client.Subscription
	for i := 0; i < cfg.Consumers; i++ {
		c, err := r.dial(setupCtx, fmt.Sprintf("consumer-%d", i))
		if err != nil {
			return fmt.Errorf("connect consumer %d: %w", i, err)
		}
		sub, err := c.Subscribe(setupCtx, cfg.Topic, client.SubscribeOptions{
			Group: cfg.Group, Partitions: r.parts, Prefetch: uint32(cfg.Prefetch), AutoAck: cfg.AutoAck,
		})
		if err != nil {
			return fmt.Errorf("subscribe consumer %d: %w", i, err)
		}
		subs = append(subs, sub)
		e2e[i] = new(Histogram)
	}
	prods := make([]*producer, cfg.Producers)
	for i := range prods {
		c, err := r.dial(setupCtx, fmt.Sprintf("producer-%d", i))
		if err != nil {
			return fmt.Errorf("connect producer %d: %w", i, err)
		}
		prods[i] = &producer{idx: uint32(i), pub: c.Publisher(cfg.Topic, client.PublisherOptions{Group: cfg.Group}),
			hist: new(Histogram), lag: new(Histogram)}
	}

	r.start = Now()
	r.warmEnd = r.start + int64(cfg.Warmup)
	r.stopAt = r.warmEnd + int64(cfg.Duration)
	if cfg.Rate > 0 && cfg.Producers > 0 {
		r.interval = int64(float64(time.Second) * float64(cfg.Producers) / cfg.Rate)
		if r.interval < 1 {
			r.interval = 1
		}
	}
	for i, sub := range subs {
		consWG.Add(1)
		go func() {
			defer consWG.Done()
			r.consume(consCtx, sub, e2e[i])
		}()
	}
	// Publishes may take until the end of the drain to be answered.
	pubCtx, cancelPub := context.WithDeadline(context.Background(), epoch.Add(time.Duration(r.stopAt)+cfg.Drain))
	defer cancelPub()
	var prodWG sync.WaitGroup
	for _, p := range prods {
		p.ctx = pubCtx
		prodWG.Add(1)
		go func() {
			defer prodWG.Done()
			r.publishLoop(p)
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
	sleepUntil(ctx, r.warmEnd)
	s0 := r.snap()
	r.cpu0 = processCPU()
	if !sleepUntil(ctx, r.stopAt) {
		fmt.Fprintln(cfg.Log, "interrupted: stopping early")
	}
	s1 := r.snap()
	r.cpu1 = processCPU()
	r.stop()
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
			if r.delivered.Load() >= r.accepted.Load() && r.tr.Lost() == 0 {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	close(progStop)
	<-progDone
	stopConsumers()
	for _, sub := range subs {
		sub.Close()
	}
	consWG.Wait()

	// Merge histograms.
	var conf, lag, e2eAll Histogram
	for _, p := range prods {
		conf.Merge(p.hist)
		lag.Merge(p.lag)
	}
	for _, h := range e2e {
		e2eAll.Merge(h)
	}
	r.fillLatencies(res, &conf, &e2eAll)
	if cfg.Rate > 0 {
		l := summarize(&lag)
		res.SendLagP50, res.SendLagP99, res.SendLagMax = l.p50, l.p99, l.max
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

func round1(v float64) float64 { return float64(int64(v*10+0.5)) / 10 }
func round3(v float64) float64 { return float64(int64(v*1000+0.5)) / 1000 }

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

func (r *run) stop() {
	r.stopping.Store(true)
	r.gateMu.Lock()
	r.gateCond.Broadcast()
	r.gateMu.Unlock()
}

// admit enforces --max-ahead; false when the run is stopping.
func (r *run) admit() bool {
	max := r.cfg.MaxAhead
	if max <= 0 {
		return !r.stopping.Load()
	}
	for {
		if r.stopping.Load() {
			return false
		}
		a := r.admitted.Load()
		if int64(a-r.delivered.Load()) < max {
			if r.admitted.CompareAndSwap(a, a+1) {
				return true
			}
			continue
		}
		// Register as a waiter before re-checking: a consumer increments
		// delivered before it looks at waiting, so one of the two sees the
		// other (sequentially consistent atomics) and no wakeup is lost.
		r.gateMu.Lock()
		r.waiting.Add(1)
		for int64(r.admitted.Load()-r.delivered.Load()) >= max && !r.stopping.Load() {
			r.gateCond.Wait()
		}
		r.waiting.Add(-1)
		r.gateMu.Unlock()
	}
}

// release gives back an admission whose publish failed.
func (r *run) release() {
	if r.cfg.MaxAhead <= 0 {
		return
	}
	r.admitted.Add(^uint64(0))
	r.wake()
}

func (r *run) wake() {
	if r.waiting.Load() > 0 {
		r.gateMu.Lock()
		r.gateCond.Signal()
		r.gateMu.Unlock()
	}
}

// slot is one publish of a producer's window: its payload buffer (the
// client keeps referring to it until the callback, for re-sends) and
// what the callback needs to account for it. Slots are allocated once, so
// a publish allocates nothing in the bench.
type slot struct {
	r     *run
	p     *producer
	free  chan *slot
	seq   uint64
	stamp int64
	part  uint32
	msg   client.Message
	done  func(uint64, error)
}

// publishLoop drives one producer. Confirmed: each publish takes a slot
// (waiting while --window are in flight) and PublishAsync's callback
// gives it back. Fire-and-forget: Publish returns once the frame is
// queued, and the window does not apply.
func (r *run) publishLoop(p *producer) {
	cfg := &r.cfg
	window := cfg.Window
	if !cfg.Confirmed {
		window = 1
	}
	free := make(chan *slot, window)
	for range window {
		s := &slot{r: r, p: p, free: free}
		buf := make([]byte, cfg.Size)
		for i := HeaderSize; i < len(buf); i++ {
			buf[i] = byte(i)
		}
		s.msg = client.Message{Partition: &s.part, Payload: buf}
		s.done = s.confirmed
		free <- s
	}
	defer func() {
		for range window { // every callback has run (the client bounds them by ctx)
			<-free
		}
	}()
	np := uint64(len(r.parts))
	// Stagger the producers' schedules inside one interval.
	offset := r.interval * int64(p.idx) / int64(max(1, cfg.Producers))
	var seenErrs uint64
	for {
		if e := p.errs.Load(); e != seenErrs {
			seenErrs = e
			time.Sleep(10 * time.Millisecond) // do not spin on a failing broker
		}
		if !r.admit() {
			return
		}
		seq := p.seq
		if seq >= MaxSeq {
			return
		}
		p.seq++
		s := <-free
		var stamp int64
		if r.interval > 0 {
			stamp = r.start + int64(seq)*r.interval + offset
			if stamp >= r.stopAt {
				free <- s
				return
			}
			if d := stamp - Now(); d > 0 {
				time.Sleep(time.Duration(d))
			}
			if stamp >= r.warmEnd {
				p.lag.Record(Now() - stamp)
			}
		} else {
			stamp = Now()
			if stamp >= r.stopAt {
				free <- s
				return
			}
		}
		Stamp{Sent: stamp, Run: r.runID, Producer: p.idx, Seq: seq}.Put(s.msg.Payload)
		s.seq, s.stamp, s.part = seq, stamp, r.parts[(seq+uint64(p.idx))%np]
		r.sent.Add(1)
		if cfg.Confirmed {
			if err := p.pub.PublishAsync(p.ctx, s.msg, s.done); err != nil {
				s.failed(err) // refused: no callback will come
			}
			continue
		}
		err := p.pub.Publish(p.ctx, s.msg)
		if err != nil {
			s.failed(err)
			continue
		}
		r.tr.Accept(p.idx, seq)
		r.accepted.Add(1)
		free <- s
	}
}

// confirmed is the PublishAsync callback. Callbacks of one client run one
// at a time, so the producer's histogram needs no lock.
func (s *slot) confirmed(_ uint64, err error) {
	if err != nil {
		s.failed(err)
		return
	}
	r, p := s.r, s.p
	t := Now()
	r.tr.Accept(p.idx, s.seq)
	r.accepted.Add(1)
	if s.stamp >= r.warmEnd {
		p.hist.Record(t - s.stamp)
	}
	s.free <- s
}

func (s *slot) failed(err error) {
	r, p := s.r, s.p
	r.pubErrs.Add(1)
	p.errs.Add(1)
	r.release()
	if p.ctx.Err() == nil {
		r.noteErr("publish", err)
	}
	s.free <- s
}

// consume takes deliveries until ctx ends, checks them against the
// tracker, records publish→deliver latency and acks.
func (r *run) consume(ctx context.Context, sub *client.Subscription, e2e *Histogram) {
	autoAck := r.cfg.AutoAck
	for {
		d, err := sub.Next(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, client.ErrClosed) {
				return
			}
			r.nextErrs.Add(1)
			r.noteErr("consume", err)
			if sub.Err() != nil {
				return // every partition ended for good
			}
			continue
		}
		t := Now()
		r.onDelivery(d.Payload, t, e2e)
		if !autoAck {
			if err := d.Ack(ctx); err != nil && ctx.Err() == nil {
				r.ackErrs.Add(1)
				r.noteErr("ack", err)
			}
		}
	}
}

// onDelivery accounts for one delivered payload received at t and reports
// whether it was a first delivery of this run.
func (r *run) onDelivery(payload []byte, t int64, e2e *Histogram) (Stamp, bool) {
	s, ok := ReadStamp(payload)
	switch {
	case !ok || s.Run != r.runID || !r.tr.Valid(s.Producer, s.Seq):
		r.foreign.Add(1)
		return s, false
	case r.tr.Deliver(s.Producer, s.Seq):
		r.dups.Add(1)
		return s, false
	}
	r.delivered.Add(1)
	r.wake()
	if s.Sent >= r.warmEnd && e2e != nil {
		e2e.Record(t - s.Sent)
	}
	return s, true
}

func (r *run) progress(stop <-chan struct{}) {
	w := r.cfg.Progress
	tk := time.NewTicker(time.Second)
	defer tk.Stop()
	prev := r.snap()
	for {
		select {
		case <-stop:
			return
		case <-tk.C:
		}
		// Safety net for the max-ahead gate (a wakeup is never needed here,
		// but a stalled producer costs a second at most).
		r.gateMu.Lock()
		r.gateCond.Broadcast()
		r.gateMu.Unlock()
		if w == nil {
			continue
		}
		s := r.snap()
		el := float64(s.t-prev.t) / 1e9
		phase := "run"
		switch {
		case s.t < r.warmEnd:
			phase = "warmup"
		case s.t >= r.stopAt:
			phase = "drain"
		}
		errs := r.pubErrs.Load() + r.ackErrs.Load() + r.nextErrs.Load() + r.timeouts.Load()
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
	res.Mode, res.Topic, res.Group = cfg.Mode, cfg.Topic, cfg.Group
	res.Addr = strings.Join(cfg.Client.Addrs, ",")
	res.Partitions, res.Size, res.Producers, res.Consumers = cfg.Partitions, cfg.Size, cfg.Producers, cfg.Consumers
	res.Window, res.Confirmed, res.Prefetch, res.AutoAck = cfg.Window, cfg.Confirmed, cfg.Prefetch, cfg.AutoAck
	res.DurationS, res.WarmupS, res.DrainS = cfg.Duration.Seconds(), cfg.Warmup.Seconds(), cfg.Drain.Seconds()
	res.Rate, res.MaxAhead = cfg.Rate, cfg.MaxAhead
	res.Coalesce = true // core/client batches its writes

	res.Sent = r.sent.Load()
	if cfg.Confirmed {
		res.ConfirmedN = r.accepted.Load()
	}
	res.Delivered = r.delivered.Load()
	res.Duplicates = r.dups.Load()
	res.Foreign = r.foreign.Load()
	res.PublishErrors = r.pubErrs.Load()
	res.AckErrors = r.ackErrs.Load()
	res.ConsumeErrors = r.nextErrs.Load()
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
	res.LoadAvgEnd = loadAvg()
	res.CPUPressure, res.IOPressure = pressure("cpu"), pressure("io")
	stats := map[string]uint64{}
	for _, c := range r.clients {
		s := c.Stats()
		add := func(k string, v uint64) {
			if v > 0 {
				stats[k] += v
			}
		}
		add("prefetch_violations", s.PrefetchViolations)
		add("protocol_violations", s.ProtocolViolations)
		add("uncorrelated_errors", s.UncorrelatedErrors)
		add("unmatched_replies", s.UnmatchedReplies)
		add("unknown_sub_deliveries", s.UnknownSubDeliveries)
		add("dropped_deliveries", s.DroppedDeliveries)
		add("stale_settles", s.StaleSettles)
		add("reconnects", s.Reconnects)
	}
	for _, c := range r.clients {
		// Write batching inside the client: frames asked for (each merged
		// ACK counted), the write(2) calls that carried them, and bytes.
		s := c.Stats()
		stats["coalesced_frames"] += s.FramesQueued + s.AcksMerged
		stats["coalesced_syscalls"] += s.WriteCalls
		stats["coalesced_bytes"] += s.BytesWritten
		if s.AcksMerged > 0 {
			stats["acks_merged"] += s.AcksMerged
		}
	}
	if n := res.MsgsPerSec * res.ElapsedS; n > 0 && r.cpu1.ok {
		user, sys := r.cpu1.user-r.cpu0.user, r.cpu1.sys-r.cpu0.sys
		res.CPUUserS, res.CPUSysS = round3(user), round3(sys)
		res.CPUPerMsgUS = round3((user + sys) * 1e6 / n)
	}
	if len(stats) > 0 {
		res.ClientStats = stats
	}
}

// sortedKeys is used by the table printer for stable output.
func sortedKeys(m map[string]uint64) []string {
	k := make([]string, 0, len(m))
	for s := range m {
		k = append(k, s)
	}
	sort.Strings(k)
	return k
}
