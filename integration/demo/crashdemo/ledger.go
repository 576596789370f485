package crashdemo

import (
	"context"
	"errors"
	"net"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/wire"
)

// msg is what the client knows of one message it published.
type msg struct {
	sent      time.Duration // since the demo's start
	confirmed time.Duration // 0: not (yet) confirmed
	failed    bool          // the publish ended with an error
	// Deliveries: how many, the first one, and every later one (only
	// duplicates allocate).
	deliveries int
	first      time.Duration
	again      []time.Duration
}

// second is one second of the run, counted when things happened.
type second struct {
	published, confirmed, delivered, redelivered, errors int
	byCode                                               map[string]int
}

// mark is a moment the ledger measures recovery from: the first confirm,
// and the first delivery, of a message published after it (after the
// killed process was gone, for a crash).
type mark struct {
	label              string
	at, after          time.Duration // since the demo's start
	firstConfirm       time.Duration // since the demo's start; 0 = none yet
	firstDelivery      time.Duration
	reportedC, reportD bool
}

// ledger is the client's record of the run: every message by sequence
// number, counters per second, errors by code, and the marks.
type ledger struct {
	t0 time.Time

	mu          sync.Mutex
	msgs        []msg
	secs        []second
	marks       []*mark
	errByCode   map[string]int
	ackErrs     map[string]int
	consumeErrs map[string]int
	unknown     int // deliveries whose payload names no message of this run
	skipped     int // publishes that fell due and were not sent
}

func newLedger(t0 time.Time) *ledger {
	return &ledger{t0: t0, errByCode: map[string]int{}, ackErrs: map[string]int{}, consumeErrs: map[string]int{}}
}

func (l *ledger) now() time.Duration { return time.Since(l.t0) }

// secLocked returns the counters of the second at d.
func (l *ledger) secLocked(d time.Duration) *second {
	i := int(d / time.Second)
	for len(l.secs) <= i {
		l.secs = append(l.secs, second{})
	}
	return &l.secs[i]
}

// published records a new message and returns its sequence number.
func (l *ledger) published() int {
	d := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, msg{sent: d})
	l.secLocked(d).published++
	return len(l.msgs) - 1
}

// outcome records how publish seq ended.
func (l *ledger) outcome(seq int, err error) {
	d := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	m := &l.msgs[seq]
	s := l.secLocked(d)
	if err != nil {
		m.failed = true
		code := errorLabel(err)
		l.errByCode[code]++
		s.errors++
		if s.byCode == nil {
			s.byCode = map[string]int{}
		}
		s.byCode[code]++
		return
	}
	m.confirmed = d
	s.confirmed++
	for _, mk := range l.marks {
		if mk.firstConfirm == 0 && m.sent >= mk.after {
			mk.firstConfirm = d
		}
	}
}

// delivered records one delivery of seq (-1: a payload of no message of
// this run).
func (l *ledger) delivered(seq int) {
	d := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if seq < 0 || seq >= len(l.msgs) {
		l.unknown++
		return
	}
	m := &l.msgs[seq]
	s := l.secLocked(d)
	m.deliveries++
	if m.deliveries == 1 {
		m.first = d
		s.delivered++
	} else {
		m.again = append(m.again, d)
		s.redelivered++
	}
	for _, mk := range l.marks {
		if mk.firstDelivery == 0 && m.sent >= mk.after {
			mk.firstDelivery = d
		}
	}
}

// notSent counts n publishes that fell due and were skipped.
func (l *ledger) notSent(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.skipped += n
}

func (l *ledger) countErr(m map[string]int, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m[errorLabel(err)]++
}

// addMark starts measuring recovery from at, counting messages published
// from now on.
func (l *ledger) addMark(label string, at time.Duration) *mark {
	mk := &mark{label: label, at: at, after: l.now()}
	l.mu.Lock()
	l.marks = append(l.marks, mk)
	l.mu.Unlock()
	return mk
}

// markNews returns the recoveries measured since the last call, once each.
func (l *ledger) markNews() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, mk := range l.marks {
		if mk.firstConfirm != 0 && !mk.reportedC {
			mk.reportedC = true
			out = append(out, "first confirm since \""+mk.label+"\": "+fmtDur(mk.firstConfirm-mk.at))
		}
		if mk.firstDelivery != 0 && !mk.reportD {
			mk.reportD = true
			out = append(out, "first delivery since \""+mk.label+"\": "+fmtDur(mk.firstDelivery-mk.at))
		}
	}
	return out
}

// secondAt returns a copy of the counters of second i.
func (l *ledger) secondAt(i int) second {
	l.mu.Lock()
	defer l.mu.Unlock()
	if i >= len(l.secs) {
		return second{}
	}
	s := l.secs[i]
	if s.byCode != nil {
		m := make(map[string]int, len(s.byCode))
		for k, v := range s.byCode {
			m[k] = v
		}
		s.byCode = m
	}
	return s
}

// undelivered counts confirmed messages not delivered yet.
func (l *ledger) undelivered() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for i := range l.msgs {
		if l.msgs[i].confirmed != 0 && l.msgs[i].deliveries == 0 {
			n++
		}
	}
	return n
}

func fmtDur(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', 2, 64) + " s"
}

// codeNames are the Fibril wire error codes the demo may see, by name.
var codeNames = map[uint16]string{
	wire.CodeBadRequest:     "bad request",
	wire.CodeUnauthorized:   "unauthorized",
	wire.CodeForbidden:      "forbidden",
	wire.CodeNotFound:       "not found",
	wire.CodeConflict:       "conflict",
	wire.CodeInternal:       "internal",
	wire.CodeUnavailable:    "unavailable",
	wire.CodeOutcomeUnknown: "outcome unknown",
}

// errorLabel names an error the client returned: the broker's wire code
// and its name, or what the client saw without an answer.
func errorLabel(err error) string {
	var be *client.Error
	if errors.As(err, &be) {
		name := codeNames[be.Code]
		if name == "" {
			name = "error"
		}
		return strconv.Itoa(int(be.Code)) + " " + name
	}
	var ne net.Error
	switch {
	case errors.Is(err, errPrivateDial):
		return "private address refused"
	case errors.Is(err, client.ErrOutcomeUnknown) && errors.Is(err, context.DeadlineExceeded):
		return "timeout, outcome unknown"
	case errors.Is(err, client.ErrOutcomeUnknown):
		return "connection lost, outcome unknown"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout, not sent"
	case errors.Is(err, client.ErrConnectionLost), errors.Is(err, client.ErrHeartbeatTimeout):
		return "connection lost"
	case errors.Is(err, client.ErrStaleDelivery):
		return "stale delivery"
	case errors.Is(err, client.ErrClosed):
		return "client closed"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.As(err, &ne):
		return "network error"
	}
	return "other"
}

// codesLine renders errors by code as "503 unavailable×3, timeout×1",
// largest first.
func codesLine(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	out := ""
	for i, k := range keys {
		if i > 0 {
			out += ", "
		}
		out += k + "×" + strconv.Itoa(m[k])
	}
	return out
}
