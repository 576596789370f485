package broker

// Queue limits and the disk guard (docs/admin.md#limits): the runtime
// settings' limits group applied to the engine whenever the document
// changes, and the free space of the data directory's file system
// watched so that publishes are refused before a write can fail on a
// full disk.

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fibrilgo/fibril/core/latency"
	"github.com/fibrilgo/fibril/core/queue"
	"github.com/fibrilgo/fibril/core/settings"
	"github.com/fibrilgo/fibril/core/storage"
)

// applyLimits gives the engine the limits of every runtime settings
// document, now and after each change, until stop closes.
func applyLimits(st *settings.Store, qm *queue.Manager, stop <-chan struct{}) {
	for {
		changed := st.Changed()
		qm.SetLimits(engineLimits(st.Current().Limits))
		select {
		case <-changed:
		case <-stop:
			return
		}
	}
}

func engineLimits(l settings.Limits) map[queue.Key]queue.Limit {
	out := make(map[queue.Key]queue.Limit, len(l.Queues))
	for _, q := range l.Queues {
		lim := queue.Limit{MaxMessages: uint64(max(q.MaxMessagesPerPartition, 0))}
		if q.Overflow == settings.OverflowDropOldest {
			lim.Overflow = queue.DropOldest
		}
		out[queueKey(q.Topic, q.Group)] = lim
	}
	return out
}

// diskFree reports the bytes available to this process on dir's file
// system (statFree: disk_unix.go, disk_other.go). It and
// diskCheckInterval are variables so tests can make a disk look full; a
// guard copies both when it is made.
var diskFree = statFree

// diskCheckInterval is how often the disk guard looks at free space.
var diskCheckInterval = time.Second

// diskGuard refuses publishes while the data directory's file system has
// less than storage.min_free_bytes free, and accepts them again once it
// has 10% more than that (so a disk hovering at the threshold does not
// flap).
type diskGuard struct {
	dir      string
	min      uint64
	read     func(dir string) (uint64, error) // diskFree when the guard was made
	interval time.Duration
	free     atomic.Int64 // last reading; -1 before the first
	refused  atomic.Bool
}

func newDiskGuard(dir string, min int64) *diskGuard {
	g := &diskGuard{dir: dir, min: uint64(max(min, 0)), read: diskFree, interval: diskCheckInterval}
	g.free.Store(-1)
	return g
}

// check reads the free space once and returns the refusal to apply: a
// reason, "" to accept writes, or changed false when nothing changes.
func (g *diskGuard) check() (reason string, changed bool, err error) {
	free, err := g.read(g.dir)
	if err != nil {
		return "", false, err
	}
	g.free.Store(int64(min(free, 1<<62)))
	if g.min == 0 {
		return "", false, nil
	}
	resume := g.min + g.min/10
	switch {
	case !g.refused.Load() && free < g.min:
		g.refused.Store(true)
		return fmt.Sprintf("the disk is nearly full: %d bytes free on the data directory's file system, below storage.min_free_bytes = %d; publishes are refused until %d are free",
			free, g.min, resume), true, nil
	case g.refused.Load() && free >= resume:
		g.refused.Store(false)
		return "", true, nil
	}
	return "", false, nil
}

// watchDisk runs the guard until stop closes, applying its verdicts to
// the engine and to readiness.
func (b *Broker) watchDisk(g *diskGuard, qm *queue.Manager, stop <-chan struct{}) {
	t := time.NewTicker(g.interval)
	defer t.Stop()
	failing := false
	for {
		reason, changed, err := g.check()
		switch {
		case err != nil && !failing:
			failing = true
			b.log.Warn("cannot read the data directory's free space", "dir", g.dir, "err", err)
		case err == nil && failing:
			failing = false
		}
		if changed {
			qm.RefuseWrites(reason)
			b.admin.SetCondition("disk", reason)
			if reason != "" {
				b.log.Error("refusing publishes: the disk is nearly full", "free_bytes", g.free.Load(), "min_free_bytes", g.min)
			} else {
				b.log.Info("accepting publishes again: disk space is back", "free_bytes", g.free.Load())
			}
		}
		select {
		case <-t.C:
		case <-stop:
			return
		}
	}
}

// registerDiskMetrics exports the guard's view.
func registerDiskMetrics(reg prometheus.Registerer, g *diskGuard, qm *queue.Manager) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "fibril_storage_free_bytes",
		Help: "Bytes free on the data directory's file system at the last check (every second)."},
		func() float64 { return float64(g.free.Load()) }))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "fibril_storage_writes_refused",
		Help: "1 while publishes are refused because free space is below storage.min_free_bytes."},
		func() float64 {
			if g.refused.Load() {
				return 1
			}
			return 0
		}))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "fibril_broker_overflow_rejected_total",
		Help: "Publishes refused because the queue partition was at its limit (limits.queues, overflow reject_publish or nothing to drop)."},
		func() float64 { return float64(qm.Stats().OverflowRejected) }))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "fibril_broker_overflow_dropped_total",
		Help: "Ready messages dropped to make room for a publish (limits.queues, overflow drop_oldest)."},
		func() float64 { return float64(qm.Stats().OverflowDropped) }))
}

// histogramCollector exports a latency.Histogram as a Prometheus
// histogram, read at scrape time.
type histogramCollector struct {
	desc *prometheus.Desc
	h    *latency.Histogram
}

func (c histogramCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c histogramCollector) Collect(ch chan<- prometheus.Metric) {
	buckets, n, sum := c.h.Snapshot()
	ch <- prometheus.MustNewConstHistogram(c.desc, n, sum, buckets)
}

// registerLatencies exports the engines' latency histograms.
func registerLatencies(reg prometheus.Registerer, qm *queue.Manager) {
	reg.MustRegister(histogramCollector{h: storage.FsyncLatency, desc: prometheus.NewDesc("fibril_storage_fsync_seconds",
		"Time each sync of a segment, journal or write-ahead log file took (process-wide).", nil, nil)})
	reg.MustRegister(histogramCollector{h: qm.PublishToDeliver(), desc: prometheus.NewDesc("fibril_broker_publish_to_deliver_seconds",
		"Time from the broker receiving a queue message to its first delivery (millisecond resolution; redeliveries not counted).", nil, nil)})
}
