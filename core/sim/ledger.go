package sim

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fibrilgo/fibril/core/client"
)

// Ledger is what the clients of a run saw, and the violations found.
type Ledger struct {
	mu          sync.Mutex
	confirmed   map[string]place // payload → where its confirm said it is
	unknown     map[string]bool  // outcome unknown (504, a connection lost with the publish sent)
	failed      map[string]int   // refused publishes, by kind (nothing stored)
	delivered   map[string]int   // payload → deliveries
	at          map[place]string // (partition, offset) → the payload first delivered there
	acked       map[string]bool
	ackedAgain  int // deliveries of a payload after the client acked it (at-least-once allows some)
	violations  []string
	nviolations int
	events      []string // the run's timeline, for the report
	start       time.Time
}

type place struct {
	partition uint32
	offset    uint64
}

func newLedger() *Ledger {
	return &Ledger{
		confirmed: map[string]place{},
		unknown:   map[string]bool{},
		failed:    map[string]int{},
		delivered: map[string]int{},
		at:        map[place]string{},
		acked:     map[string]bool{},
		start:     time.Now(),
	}
}

func (l *Ledger) violate(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.violateLocked(format, args...)
}

// violateLocked records a violation; past the first 50 only the count
// grows.
func (l *Ledger) violateLocked(format string, args ...any) {
	l.nviolations++
	if len(l.violations) < 50 {
		l.violations = append(l.violations, fmt.Sprintf("[t=%v] ", time.Since(l.start).Round(time.Millisecond))+fmt.Sprintf(format, args...))
	}
}

// Event notes a step of the scenario in the timeline.
func (l *Ledger) Event(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, fmt.Sprintf("t=%v ", time.Since(l.start).Round(time.Millisecond))+fmt.Sprintf(format, args...))
}

// Violations are the broken promises found so far.
func (l *Ledger) Violations() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.violations...)
}

func (l *Ledger) confirm(payload string, p place) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.confirmed[payload] = p
	// A delivery seen at this place before the confirm arrived.
	if got, ok := l.at[p]; ok && got != payload {
		l.violateLocked("partition %d offset %d: confirmed for %s, delivered as %s", p.partition, p.offset, payload, got)
	}
}

func (l *Ledger) deliver(d *client.Delivery) {
	payload := string(d.Payload)
	p := place{d.Partition, d.Offset}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.delivered[payload]++
	if l.acked[payload] {
		l.ackedAgain++
	}
	if got, ok := l.at[p]; ok && got != payload {
		l.violateLocked("partition %d offset %d delivered as %s and as %s: two brokers wrote the same place", p.partition, p.offset, got, payload)
	} else if !ok {
		l.at[p] = payload
	}
	if c, ok := l.confirmed[payload]; ok && c != p {
		l.violateLocked("%s confirmed at partition %d offset %d, delivered from partition %d offset %d", payload, c.partition, c.offset, p.partition, p.offset)
	}
}

// take records a delivery and acknowledges it.
func (l *Ledger) take(d *client.Delivery) {
	l.deliver(d)
	if err := d.Ack(context.Background()); err == nil {
		l.mu.Lock()
		l.acked[string(d.Payload)] = true
		l.mu.Unlock()
	}
}

// Check adds the end-of-run violations: every confirmed message delivered.
func (l *Ledger) Check() {
	l.mu.Lock()
	var lost []string
	for p := range l.confirmed {
		if l.delivered[p] == 0 {
			lost = append(lost, p)
		}
	}
	l.mu.Unlock()
	sort.Strings(lost)
	if len(lost) > 0 {
		l.violate("%d confirmed messages never delivered, e.g. %v", len(lost), lost[:min(len(lost), 10)])
	}
}

// Summary is one line of totals.
func (l *Ledger) Summary() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	dups := 0
	for _, n := range l.delivered {
		dups += n - 1
	}
	unknownIn := 0
	var unknownOut []string
	for p := range l.unknown {
		if l.delivered[p] > 0 {
			unknownIn++
		} else {
			unknownOut = append(unknownOut, p)
		}
	}
	sort.Strings(unknownOut)
	var failed []string
	for k, n := range l.failed {
		failed = append(failed, fmt.Sprintf("%s×%d", k, n))
	}
	sort.Strings(failed)
	return fmt.Sprintf("confirmed %d, delivered %d distinct (%d redeliveries, %d after an ack), outcome unknown %d (%d of them delivered; not: %v), refused [%s], violations %d",
		len(l.confirmed), len(l.delivered), dups, l.ackedAgain, len(l.unknown), unknownIn, unknownOut[:min(len(unknownOut), 5)], strings.Join(failed, " "), l.nviolations)
}

// Timeline is the run's events, one per line.
func (l *Ledger) Timeline() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.events, "\n")
}

// errKind names a failed publish for the totals.
func errKind(err error) string {
	var be *client.Error
	switch {
	case errors.As(err, &be):
		return fmt.Sprintf("ERROR %d", be.Code)
	case errors.Is(err, client.ErrOutcomeUnknown):
		return "outcome unknown"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	}
	return "other"
}

// unknownOutcome reports whether a failed publish may have been stored.
func unknownOutcome(err error) bool {
	var be *client.Error
	if errors.As(err, &be) {
		return be.Code == 504
	}
	return errors.Is(err, client.ErrOutcomeUnknown) || errors.Is(err, context.DeadlineExceeded)
}

// Produce publishes with confirms to topic, spread over parts partitions,
// one at a time with pace between them, until stop or n messages; it
// returns when done.
func (c *Cluster) Produce(cl *client.Client, topic string, parts, n int, prefix string, stop <-chan struct{}, pace time.Duration) {
	l := c.Ledger
	pub := cl.Publisher(topic, client.PublisherOptions{})
	for i := range n {
		select {
		case <-stop:
			return
		default:
		}
		payload := fmt.Sprintf("%s-%d", prefix, i)
		part := uint32(i % parts)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		off, err := pub.PublishConfirmed(ctx, client.Message{Partition: &part, Payload: []byte(payload)})
		cancel()
		if err == nil {
			l.confirm(payload, place{part, off})
			if pace > 0 {
				select {
				case <-stop:
					return
				case <-time.After(pace):
				}
			}
			continue
		}
		l.mu.Lock()
		if unknownOutcome(err) {
			l.unknown[payload] = true
		}
		l.failed[errKind(err)]++
		l.mu.Unlock()
		select {
		case <-stop:
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Consume takes deliveries of topic and acks them until stop.
func (c *Cluster) Consume(cl *client.Client, topic string, stop <-chan struct{}) error {
	sub, err := cl.Subscribe(context.Background(), topic, client.SubscribeOptions{Prefetch: 32})
	if err != nil {
		return err
	}
	defer sub.Close()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		d, err := sub.Next(ctx)
		cancel()
		select {
		case <-stop:
			return nil
		default:
		}
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				continue
			}
			return err
		}
		c.Ledger.take(d)
	}
}

// Drain consumes topic through cl until every confirmed message was
// delivered (or within passes), then watches for quiet long enough for any
// lease to lapse: a delivery then is a settled message coming back.
func (c *Cluster) Drain(cl *client.Client, topic string, within, quiet time.Duration) error {
	sub, err := cl.Subscribe(context.Background(), topic, client.SubscribeOptions{Prefetch: 64})
	if err != nil {
		return err
	}
	defer sub.Close()
	missing := func() int {
		c.Ledger.mu.Lock()
		defer c.Ledger.mu.Unlock()
		n := 0
		for p := range c.Ledger.confirmed {
			if c.Ledger.delivered[p] == 0 {
				n++
			}
		}
		return n
	}
	deadline := time.Now().Add(within)
	for missing() > 0 && time.Now().Before(deadline) {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		d, err := sub.Next(ctx)
		cancel()
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				break
			}
			return err
		}
		c.Ledger.take(d)
	}
	// Everything confirmed is in; unknown-outcome and redelivered
	// messages may still come: take them until a quiet period passes.
	for {
		ctx, cancel := context.WithTimeout(context.Background(), quiet)
		d, err := sub.Next(ctx)
		cancel()
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return nil
			}
			return err
		}
		c.Ledger.take(d)
	}
}

// Recheck subscribes to topic through a new client once everything was
// drained and acknowledged, and counts what arrives within quiet: every
// such delivery is a settled message delivered again.
func (c *Cluster) Recheck(cl *client.Client, topic string, quiet time.Duration) error {
	sub, err := cl.Subscribe(context.Background(), topic, client.SubscribeOptions{Prefetch: 64})
	if err != nil {
		return err
	}
	defer sub.Close()
	var again []string
	deadline := time.Now().Add(quiet)
	for len(again) < 1000 {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		d, err := sub.Next(ctx)
		cancel()
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				break
			}
			return err
		}
		again = append(again, fmt.Sprintf("%s (partition %d offset %d)", d.Payload, d.Partition, d.Offset))
		_ = d.Ack(context.Background())
	}
	if len(again) > 0 {
		c.Ledger.violate("%d messages delivered again after everything was drained and acknowledged, e.g. %v", len(again), again[:min(len(again), 10)])
	}
	return nil
}
