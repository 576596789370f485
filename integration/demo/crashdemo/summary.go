package crashdemo

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fibrilgo/fibril/core/client"
)

// Summary is what a run measured. Times are seconds since the demo's
// start; durations are seconds.
type Summary struct {
	Started  time.Time `json:"started"`
	Settings Settings  `json:"settings"`
	// The partitions the client used, their first owner (a private broker:
	// the one killed first) and its follower.
	Queue        string   `json:"queue"`
	Partitions   []uint32 `json:"partitions"`
	PrivateOwner string   `json:"private_owner"`
	Follower     string   `json:"follower"`

	Events  []Event  `json:"events"`
	Timings []Timing `json:"timings"`
	Totals  Totals   `json:"totals"`
	// Seconds lists the run second by second (throughput.csv).
	Seconds []Second `json:"-"`
	// TrafficFrom and TrafficTo bound the traffic (seconds).
	TrafficFrom float64 `json:"traffic_from"`
	TrafficTo   float64 `json:"traffic_to"`
}

// Settings are the run's parameters, as recorded.
type Settings struct {
	Rate           int     `json:"rate_per_s"`
	Window         int     `json:"window"`
	PayloadBytes   int     `json:"payload_bytes"`
	Partitions     int     `json:"queue_partitions"`
	PublishTimeout float64 `json:"publish_timeout_s"`
	Steady         float64 `json:"steady_s"`
	PrivateDown    float64 `json:"private_down_s"`
	Settle         float64 `json:"settle_s"`
	PublicDown     float64 `json:"public_down_s"`
	After          float64 `json:"after_s"`
	Drain          float64 `json:"drain_limit_s"`
	HeartbeatMS    int     `json:"heartbeat_interval_ms"`
	LivenessTTLMS  int     `json:"liveness_ttl_ms"`
	CrashWindow    float64 `json:"crash_window_s"`
}

// Event is a crash or a restart.
type Event struct {
	At    float64 `json:"at"`
	Label string  `json:"label"`
	Node  string  `json:"node"`
}

// Timing is one crash and what followed it.
type Timing struct {
	Crash string  `json:"crash"`
	Node  string  `json:"node"`
	At    float64 `json:"at"`
	// FirstConfirm and FirstDelivery: from the crash to the first confirm,
	// and the first delivery, of a message published after it (nil: none).
	FirstConfirm  *float64 `json:"first_confirm_after_s"`
	FirstDelivery *float64 `json:"first_delivery_after_s"`
	// OwnerAfter: who owned the client's partitions next, and when the
	// admin API first showed it (from the crash), if they moved.
	OwnerAfter   string  `json:"owner_after,omitempty"`
	FailoverSeen float64 `json:"failover_seen_after_s,omitempty"`
	// RestartedAt: when the broker was started again; ReadyAfter: from
	// then until its /readyz answered 200; FirstConfirmAfterRestart: from
	// the restart to the first confirm of a message published after it.
	RestartedAt              float64  `json:"restarted_at"`
	ReadyAfter               float64  `json:"ready_after_restart_s"`
	FirstConfirmAfterRestart *float64 `json:"first_confirm_after_restart_s"`
	// Redelivered: duplicates attributed to this crash; PreviousFrom and
	// PreviousTo: when their previous deliveries had come, the earliest
	// and the latest, relative to the crash (negative: before it).
	Redelivered  int     `json:"redelivered"`
	PreviousFrom float64 `json:"previous_delivery_from_s,omitempty"`
	PreviousTo   float64 `json:"previous_delivery_to_s,omitempty"`
}

// Totals are the ledger's totals at the end.
type Totals struct {
	// Published: publishes started; Confirmed: confirmed; PublishErrors:
	// ended with an error (the message may still have been stored).
	Published     int            `json:"published"`
	Confirmed     int            `json:"confirmed"`
	PublishErrors int            `json:"publish_errors"`
	ErrorsByCode  map[string]int `json:"publish_errors_by_code"`
	// NotSent: publishes that fell due while the producer waited for a
	// connection or the window of unconfirmed publishes was full (skipped,
	// never made up for).
	NotSent int `json:"not_sent"`
	// Delivered: distinct messages delivered; Deliveries: all deliveries.
	Delivered  int `json:"delivered"`
	Deliveries int `json:"deliveries"`
	// Lost: confirmed and never delivered.
	Lost int `json:"lost"`
	// Duplicates: deliveries beyond the first; DuplicateMessages: messages
	// delivered more than once; UnexplainedDuplicates: duplicates whose
	// previous delivery was not close to a crash (CrashWindow).
	Duplicates            int `json:"duplicates"`
	DuplicateMessages     int `json:"duplicate_messages"`
	UnexplainedDuplicates int `json:"unexplained_duplicates"`
	// DeliveredUnconfirmed: messages delivered whose publish ended with an
	// error (a confirm lost with a connection: stored after all).
	DeliveredUnconfirmed int `json:"delivered_unconfirmed"`
	UnknownDeliveries    int `json:"unknown_deliveries"`
	// Dials by the client: to the public broker's address, to a private
	// broker's address (refused), to anything else (refused).
	DialsPublic  int64 `json:"dials_public"`
	DialsPrivate int64 `json:"dials_private"`
	DialsOther   int64 `json:"dials_other"`

	AckErrors     map[string]int `json:"ack_errors"`
	ConsumeErrors map[string]int `json:"consume_errors"`
	// What the client saw of the brokers' behaviour (all zero but
	// Reconnects when the brokers keep the protocol).
	PrefetchViolations   uint64 `json:"prefetch_violations"`
	ProtocolViolations   uint64 `json:"protocol_violations"`
	UncorrelatedErrors   uint64 `json:"uncorrelated_errors"`
	UnknownSubDeliveries uint64 `json:"unknown_sub_deliveries"`
	Reconnects           uint64 `json:"reconnects"`
}

// Second is one line of throughput.csv.
type Second struct {
	At                                                        int
	Published, Confirmed, Delivered, Redelivered, PublishErrs int
}

func (r *run) summarize(st client.Stats, from, to time.Duration) Summary {
	cfg := &r.cfg
	s := Summary{
		Started: r.t0.UTC().Round(time.Second),
		Settings: Settings{
			Rate: cfg.Rate, Window: cfg.Window, PayloadBytes: cfg.PayloadBytes, Partitions: cfg.Partitions,
			PublishTimeout: cfg.PublishTimeout.Seconds(), Steady: cfg.Steady.Seconds(), PrivateDown: cfg.PrivateDown.Seconds(),
			Settle: cfg.Settle.Seconds(), PublicDown: cfg.PublicDown.Seconds(), After: cfg.After.Seconds(), Drain: cfg.Drain.Seconds(),
			HeartbeatMS: cfg.HeartbeatMS, LivenessTTLMS: cfg.LivenessTTLMS, CrashWindow: cfg.CrashWindow.Seconds(),
		},
		Queue: topic, Partitions: r.parts, PrivateOwner: r.victim, Follower: r.follower,
		TrafficFrom: secs(from), TrafficTo: secs(to),
	}
	r.mu.Lock()
	s.Events = slices.Clone(r.events)
	s.Timings = slices.Clone(r.timings)
	r.mu.Unlock()

	l := r.led
	l.mu.Lock()
	defer l.mu.Unlock()
	t := &s.Totals
	t.ErrorsByCode = copyMap(l.errByCode)
	t.AckErrors, t.ConsumeErrors = copyMap(l.ackErrs), copyMap(l.consumeErrs)
	t.UnknownDeliveries = l.unknown
	t.NotSent = l.skipped
	if r.guard != nil {
		t.DialsPublic, t.DialsPrivate, t.DialsOther = r.guard.toPublic.Load(), r.guard.toPrivate.Load(), r.guard.toOther.Load()
	}
	t.PrefetchViolations, t.ProtocolViolations = st.PrefetchViolations, st.ProtocolViolations
	t.UncorrelatedErrors, t.UnknownSubDeliveries, t.Reconnects = st.UncorrelatedErrors, st.UnknownSubDeliveries, st.Reconnects

	// Recoveries, from the marks.
	for _, mk := range l.marks {
		for i := range s.Timings {
			tm := &s.Timings[i]
			switch mk.label {
			case tm.Crash:
				tm.FirstConfirm = since(mk.firstConfirm, mk.at)
				tm.FirstDelivery = since(mk.firstDelivery, mk.at)
			case restartOf(tm.Crash):
				tm.FirstConfirmAfterRestart = since(mk.firstConfirm, mk.at)
			}
		}
	}
	// A crash's window for duplicates: from CrashWindow before it until
	// CrashWindow after the first fresh delivery that followed it.
	type window struct {
		timing   int
		kill     time.Duration
		from, to time.Duration
	}
	var windows []window
	for i, tm := range s.Timings {
		kill := time.Duration(tm.At * float64(time.Second))
		end := to
		if tm.FirstDelivery != nil {
			end = kill + time.Duration(*tm.FirstDelivery*float64(time.Second))
		}
		windows = append(windows, window{timing: i, kill: kill, from: kill - cfg.CrashWindow, to: end + cfg.CrashWindow})
	}
	for i := range l.msgs {
		m := &l.msgs[i]
		t.Published++
		switch {
		case m.confirmed != 0:
			t.Confirmed++
		case m.failed:
			t.PublishErrors++
		}
		if m.deliveries > 0 {
			t.Delivered++
			t.Deliveries += m.deliveries
			if m.confirmed == 0 {
				t.DeliveredUnconfirmed++
			}
		} else if m.confirmed != 0 {
			t.Lost++
		}
		if m.deliveries > 1 {
			t.DuplicateMessages++
			t.Duplicates += m.deliveries - 1
			prev := m.first
			for _, again := range m.again {
				explained := false
				for j := len(windows) - 1; j >= 0; j-- {
					w := windows[j]
					if w.kill <= again && prev >= w.from && prev <= w.to {
						tm := &s.Timings[w.timing]
						rel := secs(prev - w.kill)
						if tm.Redelivered == 0 || rel < tm.PreviousFrom {
							tm.PreviousFrom = rel
						}
						if tm.Redelivered == 0 || rel > tm.PreviousTo {
							tm.PreviousTo = rel
						}
						tm.Redelivered++
						explained = true
						break
					}
				}
				if !explained {
					t.UnexplainedDuplicates++
				}
				prev = again
			}
		}
	}
	for i, sec := range l.secs {
		s.Seconds = append(s.Seconds, Second{At: i, Published: sec.published, Confirmed: sec.confirmed,
			Delivered: sec.delivered, Redelivered: sec.redelivered, PublishErrs: sec.errors})
	}
	return s
}

func restartOf(crash string) string {
	switch crash {
	case evPrivateKilled:
		return evPrivateRestarted
	case evPublicKilled:
		return evPublicRestarted
	}
	return ""
}

func since(at, mark time.Duration) *float64 {
	if at == 0 {
		return nil
	}
	v := secs(at - mark)
	return &v
}

func copyMap(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func optSecs(v *float64) string {
	if v == nil {
		return "none"
	}
	return strconv.FormatFloat(*v, 'f', 2, 64) + " s"
}

// printTotals ends the transcript with the timings and totals.
func (r *run) printTotals(s Summary) {
	for _, tm := range s.Timings {
		line := fmt.Sprintf("timing: %s (%s at %.2f s): first confirm after %s, first delivery after %s",
			tm.Crash, tm.Node, tm.At, optSecs(tm.FirstConfirm), optSecs(tm.FirstDelivery))
		if tm.OwnerAfter != "" {
			line += fmt.Sprintf("; partitions moved to %s (seen after %.2f s)", tm.OwnerAfter, tm.FailoverSeen)
		}
		if tm.RestartedAt != 0 {
			line += fmt.Sprintf("; restarted at %.2f s, ready after %.2f s", tm.RestartedAt, tm.ReadyAfter)
			if tm.Crash == evPublicKilled {
				line += ", first confirm after the restart " + optSecs(tm.FirstConfirmAfterRestart)
			}
		}
		r.tx.say("%s", line)
	}
	t := s.Totals
	r.tx.say("totals: published %d, confirmed %d, publish errors %d (%s); due but not sent %d", t.Published, t.Confirmed, t.PublishErrors, codesLine(t.ErrorsByCode), t.NotSent)
	r.tx.say("totals: delivered %d distinct (%d deliveries), lost %d, duplicates %d (%d messages; %d not explained by a crash), delivered without a confirm %d",
		t.Delivered, t.Deliveries, t.Lost, t.Duplicates, t.DuplicateMessages, t.UnexplainedDuplicates, t.DeliveredUnconfirmed)
	r.tx.say("totals: client dials to the public broker %d, to a private broker %d, elsewhere %d; reconnects %d; protocol violations %d",
		t.DialsPublic, t.DialsPrivate, t.DialsOther, t.Reconnects, t.PrefetchViolations+t.ProtocolViolations+t.UncorrelatedErrors+t.UnknownSubDeliveries)
}

// writeOutputs writes summary.json, summary.md, throughput.csv and
// chart.svg into the output directory.
func (r *run) writeOutputs(s Summary) error {
	js, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	var csv strings.Builder
	csv.WriteString("second,sent,confirmed,delivered,delivered_again,publish_errors\n")
	for _, sec := range s.Seconds {
		if float64(sec.At) < s.TrafficFrom-1 {
			continue
		}
		fmt.Fprintf(&csv, "%d,%d,%d,%d,%d,%d\n", sec.At, sec.Published, sec.Confirmed, sec.Delivered, sec.Redelivered, sec.PublishErrs)
	}
	for name, data := range map[string][]byte{
		"summary.json":   append(js, '\n'),
		"summary.md":     []byte(markdown(s)),
		"throughput.csv": []byte(csv.String()),
		"chart.svg":      []byte(chart(s)),
	} {
		if err := os.WriteFile(filepath.Join(r.cfg.OutDir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// markdown renders the summary for people.
func markdown(s Summary) string {
	var b strings.Builder
	t := s.Totals
	fmt.Fprintf(&b, "# Crash demo: summary\n\n")
	fmt.Fprintf(&b, "Run started %s. Three brokers on embedded raft: `%s` public, `%s` and `%s` private. ",
		s.Started.Format(time.RFC3339), publicID, private1ID, private2ID)
	fmt.Fprintf(&b, "The client knows only the public broker and publishes with confirms to `%s` %s, owned by `%s` (follower `%s`), at %d messages/s, consuming and acknowledging all the while.\n\n",
		s.Queue, partList(s.Partitions), s.PrivateOwner, s.Follower, s.Settings.Rate)
	b.WriteString("## Timings\n\n")
	b.WriteString("| Crash | Broker | At | First confirm after | First delivery after | Partitions moved to | Restarted at | Ready after restart | First confirm after restart |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, tm := range s.Timings {
		moved := "—"
		if tm.OwnerAfter != "" {
			moved = fmt.Sprintf("`%s` (seen after %.2f s)", tm.OwnerAfter, tm.FailoverSeen)
		}
		afterRestart := "— (traffic went on)"
		if tm.Crash == evPublicKilled {
			afterRestart = optSecs(tm.FirstConfirmAfterRestart)
		}
		fmt.Fprintf(&b, "| %s | `%s` | %.2f s | %s | %s | %s | %.2f s | %.2f s | %s |\n",
			tm.Crash, tm.Node, tm.At, optSecs(tm.FirstConfirm), optSecs(tm.FirstDelivery), moved,
			tm.RestartedAt, tm.ReadyAfter, afterRestart)
	}
	b.WriteString("\n\"First confirm after\" counts from the SIGKILL to the first confirm of a message published after it; likewise for deliveries.\n\n")
	b.WriteString("## Totals\n\n| | |\n|---|---|\n")
	row := func(k string, v any) { fmt.Fprintf(&b, "| %s | %v |\n", k, v) }
	row("published", t.Published)
	row("confirmed", t.Confirmed)
	row("publish errors", fmt.Sprintf("%d (%s)", t.PublishErrors, codesLine(t.ErrorsByCode)))
	row("due but not sent (the client had no connection, or the window was full)", t.NotSent)
	row("delivered (distinct)", t.Delivered)
	row("**lost** (confirmed, never delivered)", fmt.Sprintf("**%d**", t.Lost))
	dup := fmt.Sprintf("%d deliveries of %d messages, %d not explained by a crash", t.Duplicates, t.DuplicateMessages, t.UnexplainedDuplicates)
	row("duplicates", dup)
	for _, tm := range s.Timings {
		if tm.Redelivered > 0 {
			row("— after \""+tm.Crash+"\"", fmt.Sprintf("%d; their previous deliveries came %+.3f s to %+.3f s from the crash", tm.Redelivered, tm.PreviousFrom, tm.PreviousTo))
		}
	}
	row("delivered without a confirm", t.DeliveredUnconfirmed)
	row("client dials: public / private / other", fmt.Sprintf("%d / **%d** / %d", t.DialsPublic, t.DialsPrivate, t.DialsOther))
	row("client reconnects", t.Reconnects)
	row("protocol violations seen by the client", t.PrefetchViolations+t.ProtocolViolations+t.UncorrelatedErrors+t.UnknownSubDeliveries)
	fmt.Fprintf(&b, "\n![throughput](chart.svg)\n")
	return b.String()
}
