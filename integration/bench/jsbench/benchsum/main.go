// Command benchsum prints the summary table of a compare.sh results file
// (JSON lines): per scenario and system, the median of the repetitions
// with their min–max. It uses only the standard library.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
)

// record is one line of the results file.
type record struct {
	Kind     string             `json:"kind"` // meta | run
	System   string             `json:"system"`
	Scenario string             `json:"scenario"`
	Rep      int                `json:"rep"`
	Pinned   bool               `json:"pinned"`
	Uptime   string             `json:"uptime"`
	Exit     int                `json:"exit"`
	RSSHWM   float64            `json:"server_rss_hwm_kib"`
	RSSMax   float64            `json:"server_rss_max_kib"`
	Result   map[string]any     `json:"result"`
	Meta     map[string]any     `json:"meta"`
	extra    map[string]float64 // derived
}

type metric struct {
	name  string // column header
	key   string // result field, or a derived one
	scale float64
	fmt   string
}

var (
	mThroughput = metric{"msgs/s", "msgs_per_sec", 1, "%.0f"}
	mMB         = metric{"MB/s", "mb_per_sec", 1, "%.1f"}
	mConfP50    = metric{"confirm p50 ms", "confirm_p50_us", 1e-3, "%.2f"}
	mConfP99    = metric{"confirm p99 ms", "confirm_p99_us", 1e-3, "%.2f"}
	mConfP999   = metric{"confirm p99.9 ms", "confirm_p999_us", 1e-3, "%.2f"}
	mE2EP50     = metric{"e2e p50 ms", "e2e_p50_us", 1e-3, "%.2f"}
	mE2EP99     = metric{"e2e p99 ms", "e2e_p99_us", 1e-3, "%.2f"}
	mE2EP999    = metric{"e2e p99.9 ms", "e2e_p999_us", 1e-3, "%.2f"}
	mLagP99     = metric{"send lag p99 ms", "send_lag_p99_us", 1e-3, "%.2f"}
	mRTTP50     = metric{"rtt p50 µs", "rtt_p50_us", 1, "%.0f"}
	mRTTP99     = metric{"rtt p99 µs", "rtt_p99_us", 1, "%.0f"}
	mConfP50us  = metric{"confirm p50 µs", "confirm_p50_us", 1, "%.0f"}
	mE2EP50us   = metric{"e2e p50 µs", "e2e_p50_us", 1, "%.0f"}
	mLostDup    = metric{"lost+dup", "lost_dup", 1, "%.0f"}
	mRSS        = metric{"server RSS MiB", "rss_mib", 1, "%.0f"}
	mLoad       = metric{"load 1m", "load1", 1, "%.2f"}
	mIOPSI      = metric{"io psi %", "io_pressure_pct", 1, "%.0f"}
	mGenCPU     = metric{"bench cpu µs/msg", "cpu_per_msg_us", 1, "%.1f"}
	mFsyncP50   = metric{"fsync p50 µs", "fsync_p50_us", 1, "%.0f"}
	mFsyncP99   = metric{"fsync p99 µs", "fsync_p99_us", 1, "%.0f"}
	mFsyncP999  = metric{"fsync p99.9 µs", "fsync_p999_us", 1, "%.0f"}
	mSyncsPS    = metric{"fsyncs/s", "syncs_per_sec", 1, "%.0f"}
)

// scenarios lists, in print order, the scenarios compare.sh runs and the
// columns that matter for each.
var scenarios = []struct {
	name, title string
	cols        []metric
}{
	{"a", "(a) confirmed publish, 1 producer × window 256, 1 KiB, no consumer",
		[]metric{mThroughput, mMB, mConfP50, mConfP99, mConfP999, mRSS, mGenCPU, mLoad, mIOPSI}},
	{"b", "(b) 1 producer × window 256 + 1 consumer prefetch 256 (manual ack), max-ahead 1024",
		[]metric{mThroughput, mConfP50, mConfP99, mE2EP50, mE2EP99, mE2EP999, mLostDup, mRSS, mGenCPU, mLoad, mIOPSI}},
	{"c", "(c) paced 5000 msgs/s open loop, 1 producer + 1 consumer: publish→deliver",
		[]metric{mThroughput, mE2EP50, mE2EP99, mE2EP999, mConfP99, mLagP99, mLostDup, mRSS, mLoad, mIOPSI}},
	{"d", "(d) rtt: one message at a time (publish, PubAck/PUBLISH_OK, delivery, ack)",
		[]metric{mRTTP50, mRTTP99, mConfP50us, mE2EP50us, mThroughput, mLostDup, mRSS, mLoad, mIOPSI}},
	{"fsync", "disk baseline: 1 KiB append + fsync, one at a time, on the data dirs' file system",
		[]metric{mFsyncP50, mFsyncP99, mFsyncP999, mSyncsPS, mLoad, mIOPSI}},
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: benchsum RESULTS.jsonl")
		os.Exit(2)
	}
	f, err := os.Open(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchsum:", err)
		os.Exit(1)
	}
	defer f.Close()
	if err := summarize(f, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "benchsum:", err)
		os.Exit(1)
	}
}

func num(m map[string]any, k string) (float64, bool) {
	v, ok := m[k].(float64)
	return v, ok
}

func summarize(in io.Reader, out io.Writer) error {
	var runs []*record
	var meta map[string]any
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for line := 1; sc.Scan(); line++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		r := new(record)
		if err := json.Unmarshal(sc.Bytes(), r); err != nil {
			return fmt.Errorf("line %d: %w", line, err)
		}
		switch r.Kind {
		case "meta":
			meta = r.Meta
		case "run":
			runs = append(runs, r)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	for _, r := range runs {
		r.extra = map[string]float64{}
		if r.Result == nil {
			continue
		}
		lost, _ := num(r.Result, "lost")
		dup, _ := num(r.Result, "duplicates")
		r.extra["lost_dup"] = lost + dup
		switch {
		case r.RSSHWM > 0:
			r.extra["rss_mib"] = r.RSSHWM / 1024
		case r.RSSMax > 0:
			r.extra["rss_mib"] = r.RSSMax / 1024
		}
		if la, ok := r.Result["loadavg_start"].(string); ok {
			var l1 float64
			if _, err := fmt.Sscanf(la, "%g", &l1); err == nil {
				r.extra["load1"] = l1
			}
		}
		if n, ok := num(r.Result, "syncs"); ok {
			if d, ok := num(r.Result, "duration_s"); ok && d > 0 {
				r.extra["syncs_per_sec"] = n / d
			}
		}
	}

	if meta != nil {
		fmt.Fprintf(out, "%v\n", metaLine(meta))
	}
	fmt.Fprintln(out, "cells: median [min–max] over the repetitions; ms = milliseconds; RSS = the server's peak during the run;")
	fmt.Fprintln(out, "load 1m = load average at the start of the run; io psi % = share of the last 10 s some task waited for I/O (at the end)")
	failed := 0
	for _, r := range runs {
		if r.Exit != 0 || r.Result == nil {
			failed++
		}
	}
	if failed > 0 {
		fmt.Fprintf(out, "WARNING: %d run(s) failed (exit ≠ 0 or no JSON); they are left out\n", failed)
	}
	systems := []string{}
	for _, r := range runs {
		if !slices.Contains(systems, r.System) {
			systems = append(systems, r.System)
		}
	}
	for _, s := range scenarios {
		var rows [][]string
		for _, sys := range systems {
			var sel []*record
			for _, r := range runs {
				if r.Scenario == s.name && r.System == sys && r.Exit == 0 && r.Result != nil {
					sel = append(sel, r)
				}
			}
			if len(sel) == 0 {
				continue
			}
			row := []string{sys, fmt.Sprint(len(sel))}
			for _, c := range s.cols {
				row = append(row, cell(sel, c))
			}
			rows = append(rows, row)
		}
		if len(rows) == 0 {
			continue
		}
		fmt.Fprintf(out, "\n%s\n", s.title)
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		hdr := []string{"system", "runs"}
		for _, c := range s.cols {
			hdr = append(hdr, c.name)
		}
		fmt.Fprintln(tw, strings.Join(hdr, "\t"))
		for _, row := range rows {
			fmt.Fprintln(tw, strings.Join(row, "\t"))
		}
		tw.Flush()
	}
	return nil
}

func metaLine(m map[string]any) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%v  ", k, m[k])
	}
	return strings.TrimSpace(b.String())
}

// cell is "median [min–max]" of metric c over rs ("-" when absent).
func cell(rs []*record, c metric) string {
	var vs []float64
	for _, r := range rs {
		v, ok := r.extra[c.key]
		if !ok {
			v, ok = num(r.Result, c.key)
		}
		if ok {
			vs = append(vs, v*c.scale)
		}
	}
	if len(vs) == 0 {
		return "-"
	}
	slices.Sort(vs)
	med := vs[len(vs)/2]
	if len(vs)%2 == 0 {
		med = (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2
	}
	s := fmt.Sprintf(c.fmt, med)
	if len(vs) > 1 && vs[0] != vs[len(vs)-1] {
		s += " [" + fmt.Sprintf(c.fmt, vs[0]) + "–" + fmt.Sprintf(c.fmt, vs[len(vs)-1]) + "]"
	}
	if math.IsNaN(med) {
		return "-"
	}
	return s
}
