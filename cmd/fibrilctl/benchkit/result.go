package benchkit

import (
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Result is the outcome of one run: its parameters, then its numbers.
// Its JSON field names are what `fibrilctl bench --json` and jsbench
// print and what integration/bench/compare.sh and benchsum read; a system
// adds its own fields by embedding Result. Latencies are in microseconds
// (0.1 µs precision); rates are per second of the measured window (after
// --warmup, until --duration ends; the drain is not counted). MB is 2^20
// bytes of payload, as nats bench counts it.
//
// Run fills the measurements; the driver's Finish fills the fields that
// name the system (Addr, Topic, Group, Queues, Partitions, Coalesce,
// ClientStats, Target, CountsNote).
type Result struct {
	// Parameters.
	Mode       string  `json:"mode"`
	Addr       string  `json:"addr"`
	Topic      string  `json:"topic"`
	Group      string  `json:"group,omitempty"`
	Queues     int     `json:"queues"`     // Topic-0 … Topic-(N-1) when more than 1 (QueueNames)
	Partitions int     `json:"partitions"` // of each queue
	Size       int     `json:"size"`
	Producers  int     `json:"producers"`
	Consumers  int     `json:"consumers"`
	Window     int     `json:"window"`
	Confirmed  bool    `json:"confirm_mode"` // --confirmed
	Prefetch   int     `json:"prefetch"`
	AutoAck    bool    `json:"auto_ack"`
	DurationS  float64 `json:"duration_s"`
	WarmupS    float64 `json:"warmup_s"`
	DrainS     float64 `json:"drain_s"`
	Rate       float64 `json:"rate"`
	MaxAhead   int64   `json:"max_ahead"`
	// Coalesce: fibrilctl always reports true (core/client batches its
	// frame writes; it was the --coalesce flag when the SDK wrote one frame
	// per write(2)); jsbench always false (nats.go batches by design).
	Coalesce bool `json:"coalesce"`

	// Throughput over the measured window.
	Interrupted       bool    `json:"interrupted,omitempty"` // stopped early by a signal
	ElapsedS          float64 `json:"elapsed_s"`
	MsgsPerSec        float64 `json:"msgs_per_sec"` // delivered/s with consumers, else accepted/s
	MBPerSec          float64 `json:"mb_per_sec"`
	PublishMsgsPerSec float64 `json:"publish_msgs_per_sec"` // confirmed/s (sent/s without --confirmed)
	DeliverMsgsPerSec float64 `json:"deliver_msgs_per_sec"`

	// Counts over the whole run (warmup and drain included).
	Sent                 uint64   `json:"sent"`       // publishes handed to the client
	ConfirmedN           uint64   `json:"confirmed"`  // confirms received (Fibril PUBLISH_OK, JetStream PubAck)
	Delivered            uint64   `json:"delivered"`  // distinct messages of this run delivered
	Lost                 uint64   `json:"lost"`       // accepted (confirmed, or written when unconfirmed) and never delivered
	Duplicates           uint64   `json:"duplicates"` // deliveries of a message already delivered
	LossChecked          bool     `json:"loss_checked"`
	DeliveredUnconfirmed uint64   `json:"delivered_unconfirmed"` // delivered although its publish failed
	Foreign              uint64   `json:"foreign"`               // deliveries of other runs' (or non-bench) messages
	PublishErrors        uint64   `json:"publish_errors"`
	AckErrors            uint64   `json:"ack_errors"`
	ConsumeErrors        uint64   `json:"consume_errors"`
	Timeouts             uint64   `json:"timeouts,omitempty"` // rtt: deliveries that did not come in time
	ErrorSamples         []string `json:"error_samples,omitempty"`

	// Publish → confirm, from the (scheduled) send time.
	ConfirmP50  float64 `json:"confirm_p50_us"`
	ConfirmP90  float64 `json:"confirm_p90_us"`
	ConfirmP99  float64 `json:"confirm_p99_us"`
	ConfirmP999 float64 `json:"confirm_p999_us"`
	ConfirmMax  float64 `json:"confirm_max_us"`
	ConfirmMean float64 `json:"confirm_mean_us"`
	ConfirmN    uint64  `json:"confirm_samples"`

	// Publish → delivery handed to the consumer, from the (scheduled) send time.
	E2EP50  float64 `json:"e2e_p50_us"`
	E2EP90  float64 `json:"e2e_p90_us"`
	E2EP99  float64 `json:"e2e_p99_us"`
	E2EP999 float64 `json:"e2e_p999_us"`
	E2EMax  float64 `json:"e2e_max_us"`
	E2EMean float64 `json:"e2e_mean_us"`
	E2EN    uint64  `json:"e2e_samples"`

	// --rate only: actual send time minus scheduled send time (how late
	// the bench itself sent; it is part of the latencies above).
	SendLagP50 float64 `json:"send_lag_p50_us,omitempty"`
	SendLagP99 float64 `json:"send_lag_p99_us,omitempty"`
	SendLagMax float64 `json:"send_lag_max_us,omitempty"`
	// --rate only: the confirm (with --confirmed) and publish→deliver
	// latencies measured from the actual send instead of the scheduled one
	// (the system's part alone, without the bench's lateness).
	ConfirmFromSendP50 float64 `json:"confirm_from_send_p50_us,omitempty"`
	ConfirmFromSendP99 float64 `json:"confirm_from_send_p99_us,omitempty"`
	E2EFromSendP50     float64 `json:"e2e_from_send_p50_us,omitempty"`
	E2EFromSendP99     float64 `json:"e2e_from_send_p99_us,omitempty"`

	// Publish → confirm of the publishes that met a repartition fence
	// (Slot.Fenced; warmup included): the pause a producer sees while the
	// system re-routes it to a new partition count. Absent when none did.
	FenceN   uint64  `json:"fence_samples,omitempty"`
	FenceP50 float64 `json:"fence_confirm_p50_us,omitempty"`
	FenceP99 float64 `json:"fence_confirm_p99_us,omitempty"`
	FenceMax float64 `json:"fence_confirm_max_us,omitempty"`

	// --mode rtt only: ACK write, and publish → (confirm and ack) done.
	AckP50  float64 `json:"ack_p50_us,omitempty"`
	AckP99  float64 `json:"ack_p99_us,omitempty"`
	RTTP50  float64 `json:"rtt_p50_us,omitempty"`
	RTTP90  float64 `json:"rtt_p90_us,omitempty"`
	RTTP99  float64 `json:"rtt_p99_us,omitempty"`
	RTTP999 float64 `json:"rtt_p999_us,omitempty"`
	RTTMax  float64 `json:"rtt_max_us,omitempty"`
	RTTMean float64 `json:"rtt_mean_us,omitempty"`

	// Environment.
	LoadAvgStart string `json:"loadavg_start,omitempty"`
	LoadAvgEnd   string `json:"loadavg_end,omitempty"`
	// Share of the last 10 s in which some task waited for CPU / for I/O
	// (Linux PSI, read at the end): other work contending with the run.
	CPUPressure float64           `json:"cpu_pressure_pct"`
	IOPressure  float64           `json:"io_pressure_pct"`
	ClientStats map[string]uint64 `json:"client_stats,omitempty"`

	// CPU time of the bench process (producers, consumers and their
	// clients together) over the measured window, and per message counted
	// in msgs_per_sec. 0 where getrusage is not available.
	CPUUserS    float64 `json:"cpu_user_s"`
	CPUSysS     float64 `json:"cpu_sys_s"`
	CPUPerMsgUS float64 `json:"cpu_per_msg_us"`
	// --server-pid: the server's CPU time (user + system, every thread,
	// from /proc/PID/stat in 10 ms ticks) over the measured window, and
	// per message published in it (confirmed, or sent without
	// --confirmed; delivered when there are no producers). 0 without.
	ServerCPUS        float64 `json:"server_cpu_s"`
	ServerCPUPerMsgUS float64 `json:"server_cpu_per_msg_us"`

	// For the table only: the "target" row, which names the system under
	// test, and a note appended to the "counts" row.
	Target     string `json:"-"`
	CountsNote string `json:"-"`
}

// us converts ns to µs with 0.1 µs precision.
func us(ns float64) float64 { return math.Round(ns/100) / 10 }

func round1(v float64) float64 { return float64(int64(v*10+0.5)) / 10 }
func round3(v float64) float64 { return float64(int64(v*1000+0.5)) / 1000 }

type latency struct{ p50, p90, p99, p999, max, mean float64 }

func summarize(h *Histogram) latency {
	return latency{
		p50: us(float64(h.Quantile(0.50))), p90: us(float64(h.Quantile(0.90))),
		p99: us(float64(h.Quantile(0.99))), p999: us(float64(h.Quantile(0.999))),
		max: us(float64(h.Max())), mean: us(h.Mean()),
	}
}

// loadAvg returns the first three fields of /proc/loadavg ("" elsewhere).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// pressure returns the "some avg10" figure of /proc/pressure/NAME (0
// where PSI is not available).
func pressure(name string) float64 {
	b, err := os.ReadFile("/proc/pressure/" + name)
	if err != nil {
		return 0
	}
	for _, f := range strings.Fields(strings.SplitN(string(b), "\n", 2)[0]) {
		if v, ok := strings.CutPrefix(f, "avg10="); ok {
			x, _ := strconv.ParseFloat(v, 64)
			return x
		}
	}
	return 0
}

// WriteTable prints the human summary of r.
func (r *Result) WriteTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	p := func(format string, a ...any) { fmt.Fprintf(tw, format+"\n", a...) }
	conf := "fire-and-forget"
	if r.Confirmed {
		conf = "confirmed"
	}
	rate := "unpaced"
	if r.Rate > 0 {
		rate = fmt.Sprintf("%.0f msgs/s", r.Rate)
	}
	p("mode\t%s (%s, %s)", r.Mode, conf, rate)
	p("target\t%s", r.Target)
	p("shape\t%d producers × window %d, %d consumers × prefetch %d (auto-ack %v), %d B, max-ahead %d",
		r.Producers, r.Window, r.Consumers, r.Prefetch, r.AutoAck, r.Size, r.MaxAhead)
	if r.Interrupted {
		p("note\tinterrupted: stopped before --duration")
	}
	p("window\t%.2fs measured (warmup %.1fs, drain ≤ %.1fs)", r.ElapsedS, r.WarmupS, r.DrainS)
	p("throughput\t%.0f msgs/s  %.2f MB/s  (publish %.0f/s, deliver %.0f/s)",
		r.MsgsPerSec, r.MBPerSec, r.PublishMsgsPerSec, r.DeliverMsgsPerSec)
	p("counts\tsent %d  confirmed %d  delivered %d  lost %d  duplicates %d  foreign %d%s",
		r.Sent, r.ConfirmedN, r.Delivered, r.Lost, r.Duplicates, r.Foreign, r.CountsNote)
	if !r.LossChecked {
		p("\t(no consumers: losses not checked)")
	}
	if r.PublishErrors+r.AckErrors+r.ConsumeErrors+r.Timeouts+r.DeliveredUnconfirmed > 0 {
		p("errors\tpublish %d  ack %d  consume %d  timeouts %d  delivered-unconfirmed %d",
			r.PublishErrors, r.AckErrors, r.ConsumeErrors, r.Timeouts, r.DeliveredUnconfirmed)
	}
	for _, e := range r.ErrorSamples {
		p("\t%s", e)
	}
	p("latency (µs)\tp50\tp90\tp99\tp99.9\tmax\tmean\tsamples")
	row := func(name string, l latency, n uint64) {
		p("  %s\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%d", name, l.p50, l.p90, l.p99, l.p999, l.max, l.mean, n)
	}
	if r.ConfirmN > 0 {
		row("confirm", latency{r.ConfirmP50, r.ConfirmP90, r.ConfirmP99, r.ConfirmP999, r.ConfirmMax, r.ConfirmMean}, r.ConfirmN)
	}
	if r.FenceN > 0 {
		p("  confirm at a fence\t%.1f\t\t%.1f\t\t%.1f\t\t%d", r.FenceP50, r.FenceP99, r.FenceMax, r.FenceN)
	}
	if r.E2EN > 0 {
		row("publish→deliver", latency{r.E2EP50, r.E2EP90, r.E2EP99, r.E2EP999, r.E2EMax, r.E2EMean}, r.E2EN)
	}
	if r.RTTP50 > 0 {
		row("round trip", latency{r.RTTP50, r.RTTP90, r.RTTP99, r.RTTP999, r.RTTMax, r.RTTMean}, r.ConfirmN)
		p("  ack write\t%.1f\t\t%.1f", r.AckP50, r.AckP99)
	}
	if r.Rate > 0 {
		p("  send lag\t%.1f\t\t%.1f\t\t%.1f", r.SendLagP50, r.SendLagP99, r.SendLagMax)
		if r.ConfirmFromSendP50 > 0 {
			p("  confirm from the actual send\t%.1f\t\t%.1f", r.ConfirmFromSendP50, r.ConfirmFromSendP99)
		}
		if r.E2EFromSendP50 > 0 {
			p("  publish→deliver from the actual send\t%.1f\t\t%.1f", r.E2EFromSendP50, r.E2EFromSendP99)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(r.ClientStats)) {
		p("client\t%s %d", k, r.ClientStats[k])
	}
	if r.CPUPerMsgUS > 0 {
		p("bench cpu\tuser %.2fs  sys %.2fs  (%.2f µs per message)", r.CPUUserS, r.CPUSysS, r.CPUPerMsgUS)
	}
	if r.ServerCPUS > 0 {
		p("server cpu\t%.2fs  (%.2f µs per message published)", r.ServerCPUS, r.ServerCPUPerMsgUS)
	}
	p("load\tstart %s, end %s; pressure (10 s) cpu %.0f%% io %.0f%%", r.LoadAvgStart, r.LoadAvgEnd, r.CPUPressure, r.IOPressure)
	tw.Flush()
}
