package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Modes.
const (
	ModeThroughput = "throughput"
	ModeRTT        = "rtt"
)

// durableName is the durable pull consumer every bench consumer shares
// (competing consumers, as the members of one Fibril queue group).
const durableName = "jsbench"

// Config describes one run.
type Config struct {
	URL       string
	Stream    string
	Subject   string
	Retention string // limits | workqueue

	Size       int
	Producers  int
	Consumers  int
	Window     int
	Confirmed  bool
	Prefetch   int
	AutoAck    bool
	Duration   time.Duration
	Warmup     time.Duration
	Drain      time.Duration
	Rate       float64
	MaxAhead   int64
	Mode       string
	KeepStream bool // leave the stream on the server at the end

	Progress io.Writer // one line a second (nil: none)
	Log      io.Writer // warnings (nil: Progress, else discarded)
}

// Validate fills the defaults and checks the values.
func (c *Config) Validate() error {
	if c.Mode == "" {
		c.Mode = ModeThroughput
	}
	if c.Mode != ModeThroughput && c.Mode != ModeRTT {
		return fmt.Errorf("--mode must be throughput or rtt, not %q", c.Mode)
	}
	if c.Stream == "" || c.Subject == "" {
		return errors.New("stream and subject are required")
	}
	switch c.Retention {
	case "":
		c.Retention = "limits"
	case "limits", "workqueue":
	default:
		return fmt.Errorf("--retention must be limits or workqueue, not %q", c.Retention)
	}
	if c.Size < HeaderSize {
		return fmt.Errorf("--size must be at least %d bytes (the bench header)", HeaderSize)
	}
	if c.Producers < 0 || c.Consumers < 0 {
		return errors.New("--producers and --consumers cannot be negative")
	}
	if c.Window <= 0 {
		c.Window = 1
	}
	if c.Prefetch <= 0 {
		c.Prefetch = 256
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

// counter keeps a hot counter on its own cache line.
type counter struct {
	atomic.Uint64
	_ [56]byte
}

type run struct {
	cfg   Config
	runID uint32
	tr    *Tracker

	start, warmEnd, stopAt int64 // Now() instants
	interval               int64 // ns between two sends of one producer (--rate)
	stopping               atomic.Bool

	sent, accepted, pubErrs, delivered, dups, foreign, ackErrs, consErrs, timeouts counter

	// --max-ahead gate: admitted counts publishes let through; a producer
	// waits while admitted − delivered ≥ MaxAhead.
	admitted counter
	gateMu   sync.Mutex
	gateCond *sync.Cond
	waiting  atomic.Int32

	errMu   sync.Mutex
	errSeen map[string]int
	errKeys []string

	connMu sync.Mutex
	conns  []*nats.Conn

	// CPU time of this process at the start and the end of the measured window.
	cpu0, cpu1 cpuSample
}

type cpuSample struct {
	user, sys float64
	ok        bool
}

func sampleCPU() cpuSample {
	u, s, ok := processCPU()
	return cpuSample{u, s, ok}
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

// noteErr counts an error message; at most 8 distinct ones are kept.
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

// connect opens one connection; every producer and consumer has its own,
// as in `fibrilctl bench`.
func (r *run) connect(name string) (*nats.Conn, error) {
	nc, err := nats.Connect(r.cfg.URL,
		nats.Name("jsbench/"+name),
		nats.Timeout(10*time.Second),
		nats.MaxReconnects(-1),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			r.consErrs.Add(1)
			r.noteErr("async", err)
		}),
	)
	if err != nil {
		return nil, err
	}
	r.connMu.Lock()
	r.conns = append(r.conns, nc)
	r.connMu.Unlock()
	return nc, nil
}

// Run executes one bench run. Setup failures are returned as errors;
// failures during the run are counted in the Result.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &run{cfg: cfg, runID: newRunID(), errSeen: map[string]int{}}
	r.gateCond = sync.NewCond(&r.gateMu)
	defer func() {
		r.connMu.Lock()
		defer r.connMu.Unlock()
		for _, nc := range r.conns {
			nc.Close()
		}
	}()
	res := &Result{LoadAvgStart: loadAvg(), System: "jetstream", Storage: "file", Retention: cfg.Retention, Stream: cfg.Stream}

	setupCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	nc, err := r.connect("setup")
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", cfg.URL, err)
	}
	res.ServerVersion = "nats-server " + nc.ConnectedServerVersion()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	retention := jetstream.LimitsPolicy
	if cfg.Retention == "workqueue" {
		retention = jetstream.WorkQueuePolicy
	}
	// One fresh stream per run: file storage, one replica, discard old,
	// and no limit that could drop or refuse a message during the run.
	_, err = js.CreateStream(setupCtx, jetstream.StreamConfig{
		Name:              cfg.Stream,
		Subjects:          []string{cfg.Subject},
		Storage:           jetstream.FileStorage,
		Replicas:          1,
		Retention:         retention,
		Discard:           jetstream.DiscardOld,
		MaxMsgs:           -1,
		MaxBytes:          -1,
		MaxMsgsPerSubject: -1,
		MaxMsgSize:        -1,
		MaxConsumers:      -1,
	})
	if err != nil {
		return nil, fmt.Errorf("create stream %s: %w", cfg.Stream, err)
	}
	if !cfg.KeepStream {
		defer func() {
			dctx, dcancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer dcancel()
			if err := js.DeleteStream(dctx, cfg.Stream); err != nil {
				fmt.Fprintf(cfg.Log, "warning: delete stream %s: %v\n", cfg.Stream, err)
			}
		}()
	}
	if r.cfg.Consumers > 0 {
		// A durable pull consumer with explicit acks. MaxAckPending is the
		// total of the consumers' prefetch, as a Fibril subscription's
		// prefetch bounds its unsettled deliveries.
		ack := jetstream.AckExplicitPolicy
		if cfg.AutoAck {
			ack = jetstream.AckNonePolicy
		}
		_, err = js.CreateOrUpdateConsumer(setupCtx, cfg.Stream, jetstream.ConsumerConfig{
			Durable:       durableName,
			AckPolicy:     ack,
			AckWait:       30 * time.Second,
			MaxAckPending: cfg.Prefetch * cfg.Consumers,
			DeliverPolicy: jetstream.DeliverAllPolicy,
		})
		if err != nil {
			return nil, fmt.Errorf("create consumer: %w", err)
		}
		res.ConsumerKind = fmt.Sprintf("durable pull, Consume(PullMaxMessages=%d), MaxAckPending=%d, ack %s",
			cfg.Prefetch, cfg.Prefetch*cfg.Consumers, ack)
	}
	if r.cfg.Consumers == 0 && r.cfg.MaxAhead > 0 {
		fmt.Fprintln(cfg.Log, "warning: --max-ahead ignored without consumers")
		r.cfg.MaxAhead = 0
	}
	r.tr = NewTracker(r.cfg.Producers)

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
	ictx, icancel := context.WithTimeout(context.Background(), 10*time.Second)
	if s, err := js.Stream(ictx, cfg.Stream); err == nil {
		if info, err := s.Info(ictx); err == nil {
			res.StreamMsgs = info.State.Msgs
		}
	}
	icancel()
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
		s.delivered += r.foreign.Load()
	}
	return s
}

// consumer is one consuming connection.
type consumer struct {
	cc  jetstream.ConsumeContext
	e2e *Histogram // written by the subscription's single callback goroutine
}

// startConsumer opens a connection and starts consuming the durable
// consumer with handler.
func (r *run) startConsumer(ctx context.Context, name string, handler jetstream.MessageHandler) (jetstream.ConsumeContext, error) {
	nc, err := r.connect(name)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	cons, err := js.Consumer(ctx, r.cfg.Stream, durableName)
	if err != nil {
		return nil, err
	}
	return cons.Consume(handler,
		jetstream.PullMaxMessages(r.cfg.Prefetch),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			r.consErrs.Add(1)
			r.noteErr("consume", err)
		}))
}

func stopConsumer(cc jetstream.ConsumeContext) {
	cc.Stop()
	select {
	case <-cc.Closed():
	case <-time.After(5 * time.Second):
	}
}

// producer is one publishing connection with its window of workers.
type producer struct {
	idx   uint32
	nc    *nats.Conn
	js    jetstream.JetStream
	seq   atomic.Uint64
	hists []*Histogram // confirm latency, one per worker
	lags  []*Histogram // send lag, one per worker (--rate)
}

func (r *run) runThroughput(ctx, setupCtx context.Context, res *Result) error {
	cfg := &r.cfg
	// Consumers first, so that nothing waits in the stream for them.
	cons := make([]*consumer, cfg.Consumers)
	for i := range cons {
		c := &consumer{e2e: new(Histogram)}
		autoAck := cfg.AutoAck
		cc, err := r.startConsumer(setupCtx, fmt.Sprintf("consumer-%d", i), func(m jetstream.Msg) {
			t := Now()
			r.onDelivery(m.Data(), t, c.e2e)
			if !autoAck {
				if err := m.Ack(); err != nil && !r.stopping.Load() {
					r.ackErrs.Add(1)
					r.noteErr("ack", err)
				}
			}
		})
		if err != nil {
			return fmt.Errorf("consumer %d: %w", i, err)
		}
		c.cc = cc
		cons[i] = c
	}
	defer func() {
		for _, c := range cons {
			stopConsumer(c.cc)
		}
	}()

	prods := make([]*producer, cfg.Producers)
	workers := cfg.Window
	if !cfg.Confirmed {
		workers = 1 // a core publish returns once buffered: one writer per connection
	}
	for i := range prods {
		nc, err := r.connect(fmt.Sprintf("producer-%d", i))
		if err != nil {
			return fmt.Errorf("producer %d: %w", i, err)
		}
		// Every worker keeps one publish in flight, so the pending bound
		// of the client is never the one that limits.
		js, err := jetstream.New(nc,
			jetstream.WithPublishAsyncMaxPending(workers),
			jetstream.WithPublishAsyncTimeout(30*time.Second))
		if err != nil {
			return err
		}
		p := &producer{idx: uint32(i), nc: nc, js: js}
		for w := 0; w < workers; w++ {
			p.hists = append(p.hists, new(Histogram))
			if cfg.Rate > 0 {
				p.lags = append(p.lags, new(Histogram))
			}
		}
		prods[i] = p
	}

	r.start = Now()
	r.warmEnd = r.start + int64(cfg.Warmup)
	r.stopAt = r.warmEnd + int64(cfg.Duration)
	if cfg.Rate > 0 && cfg.Producers > 0 {
		r.interval = max(1, int64(float64(time.Second)*float64(cfg.Producers)/cfg.Rate))
	}
	pubCtx, cancelPub := context.WithDeadline(context.Background(), epoch.Add(time.Duration(r.stopAt)+cfg.Drain))
	defer cancelPub()
	var prodWG sync.WaitGroup
	for _, p := range prods {
		for w := range p.hists {
			prodWG.Add(1)
			go func() {
				defer prodWG.Done()
				var lag *Histogram
				if p.lags != nil {
					lag = p.lags[w]
				}
				r.publishLoop(pubCtx, p, p.hists[w], lag)
			}()
		}
	}
	progStop, progDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(progDone)
		r.progress(progStop)
	}()

	sleepUntil(ctx, r.warmEnd)
	s0 := r.snap()
	r.cpu0 = sampleCPU()
	if !sleepUntil(ctx, r.stopAt) {
		fmt.Fprintln(cfg.Log, "interrupted: stopping early")
	}
	s1 := r.snap()
	r.cpu1 = sampleCPU()
	r.stop()
	prodWG.Wait()

	// Drain: wait (bounded) until every accepted message was delivered.
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
	stopped := cons
	cons = nil // the deferred stop has nothing left to do
	for _, c := range stopped {
		stopConsumer(c.cc)
	}

	var conf, lag, e2e Histogram
	for _, p := range prods {
		for w := range p.hists {
			conf.Merge(p.hists[w])
			if p.lags != nil {
				lag.Merge(p.lags[w])
			}
		}
	}
	// The consumers' callbacks have returned (Closed), so their
	// histograms are no longer written.
	for _, c := range stopped {
		e2e.Merge(c.e2e)
	}
	r.fillLatencies(res, &conf, &e2e)
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

// admit enforces --max-ahead; false once the run is stopping.
func (r *run) admit() bool {
	limit := r.cfg.MaxAhead
	if limit <= 0 {
		return !r.stopping.Load()
	}
	for {
		if r.stopping.Load() {
			return false
		}
		a := r.admitted.Load()
		if int64(a-r.delivered.Load()) < limit {
			if r.admitted.CompareAndSwap(a, a+1) {
				return true
			}
			continue
		}
		// Announce the wait before checking again: a consumer bumps
		// delivered before it reads waiting, so one of the two sees the
		// other and no wakeup is lost.
		r.gateMu.Lock()
		r.waiting.Add(1)
		for int64(r.admitted.Load()-r.delivered.Load()) >= limit && !r.stopping.Load() {
			r.gateCond.Wait()
		}
		r.waiting.Add(-1)
		r.gateMu.Unlock()
	}
}

// release returns the admission of a publish that failed.
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

// publishLoop is one in-flight slot of a producer: publish, wait for the
// PubAck (when confirmed), again, until the run stops. The payload buffer
// is reused only once the PubAck (or the error) came back, when the
// client holds no reference to it any more.
func (r *run) publishLoop(ctx context.Context, p *producer, hist, lag *Histogram) {
	cfg := &r.cfg
	buf := make([]byte, cfg.Size)
	for i := HeaderSize; i < len(buf); i++ {
		buf[i] = byte(i)
	}
	// Stagger the producers' schedules inside one interval.
	offset := r.interval * int64(p.idx) / int64(max(1, cfg.Producers))
	for {
		if !r.admit() {
			return
		}
		seq := p.seq.Add(1) - 1
		if seq >= MaxSeq {
			return
		}
		var stamp int64
		if r.interval > 0 {
			stamp = r.start + int64(seq)*r.interval + offset
			if stamp >= r.stopAt {
				return
			}
			if d := stamp - Now(); d > 0 {
				time.Sleep(time.Duration(d))
			}
			if stamp >= r.warmEnd {
				lag.Record(Now() - stamp)
			}
		} else {
			stamp = Now()
			if stamp >= r.stopAt {
				return
			}
		}
		Stamp{Sent: stamp, Run: r.runID, Producer: p.idx, Seq: seq}.Put(buf)
		r.sent.Add(1)
		var err error
		if cfg.Confirmed {
			err = publishConfirmed(ctx, p.js, cfg.Subject, buf)
		} else {
			err = p.nc.Publish(cfg.Subject, buf)
		}
		if err != nil {
			r.pubErrs.Add(1)
			r.release()
			if ctx.Err() != nil {
				return
			}
			r.noteErr("publish", err)
			time.Sleep(10 * time.Millisecond) // do not spin on a failing server
			continue
		}
		t := Now()
		r.tr.Accept(p.idx, seq)
		r.accepted.Add(1)
		if cfg.Confirmed && stamp >= r.warmEnd {
			hist.Record(t - stamp)
		}
	}
}

// publishConfirmed publishes asynchronously and waits for the PubAck.
func publishConfirmed(ctx context.Context, js jetstream.JetStream, subject string, data []byte) error {
	f, err := js.PublishAsync(subject, data)
	if err != nil {
		return err
	}
	select {
	case <-f.Ok():
		return nil
	case err := <-f.Err():
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// onDelivery accounts for one delivered payload received at t and reports
// whether it was the first delivery of a message of this run.
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
		// Safety net for the max-ahead gate.
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
		errs := r.pubErrs.Load() + r.ackErrs.Load() + r.consErrs.Load() + r.timeouts.Load()
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
	res.Mode, res.Addr, res.Topic = cfg.Mode, cfg.URL, cfg.Subject
	res.Partitions, res.Size, res.Producers, res.Consumers = 1, cfg.Size, cfg.Producers, cfg.Consumers
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
	res.LoadAvgEnd = loadAvg()
	res.CPUPressure, res.IOPressure = pressure("cpu"), pressure("io")
}
