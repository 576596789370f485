package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/fibrilgo/fibril/core/client"
)

// deliveryJSON is one --json output line.
type deliveryJSON struct {
	Topic         string            `json:"topic"`
	Group         string            `json:"group,omitempty"`
	Partition     uint32            `json:"partition"`
	Offset        uint64            `json:"offset"`
	Tag           uint64            `json:"tag"`
	Retries       int               `json:"retries"`
	Published     *time.Time        `json:"published,omitempty"`
	Received      *time.Time        `json:"received,omitempty"`
	ContentType   string            `json:"content_type,omitempty"`
	Headers       map[string]string `json:"headers,omitempty"`
	Payload       *string           `json:"payload,omitempty"` // when valid UTF-8
	PayloadBase64 string            `json:"payload_base64"`
	Settled       string            `json:"settled"` // ack, retry, fail, auto
}

func runConsume(ctx context.Context, g *globals, e *env, args []string) error {
	fs := newFlagSet("consume", "--topic T [--group G] [--partitions 0,1,..] [--prefetch N] [--auto-ack] [--count N] [--nack|--fail] [--wait D] [--json]\n       fibrilctl consume --stream --topic T [--start earliest|latest|offset:N|back:N|time:RFC3339] [--durable NAME] [--filter key=pattern]... [--count N] [--json]", g, e)
	topic := fs.String("topic", "", "topic to consume (required)")
	group := fs.String("group", "", "queue namespace inside the topic")
	partList := fs.String("partitions", "", "comma-separated partitions (default: all the topology knows, else 0)")
	prefetch := fs.Uint("prefetch", 0, "unsettled deliveries per partition (0 = the client default, 32, or --count when smaller)")
	autoAck := fs.Bool("auto-ack", false, "let the broker settle each delivery as it sends it")
	count := fs.Int("count", 0, "stop after this many deliveries (0 = until interrupted)")
	nack := fs.Bool("nack", false, "settle with NACK requeue (redeliver) instead of ACK")
	fail := fs.Bool("fail", false, "settle as a terminal failure (dead-letter) instead of ACK")
	wait := fs.Duration("wait", 0, "stop when nothing arrived for this long (0 = wait forever)")
	asJSON := fs.Bool("json", false, "print one JSON object per delivery")
	stream := fs.Bool("stream", false, "consume a stream (every consumer sees every record) instead of a queue")
	start := fs.String("start", "latest", "--stream without --durable: where to start: earliest, latest, offset:N, back:N or time:RFC3339")
	durable := fs.String("durable", "", "--stream: durable cursor name; acknowledged records are not read again under it")
	cohort := fs.String("consumer-group", "", "join the queue's exclusive consumer group of this name: each partition delivers to one member at a time (Fibril SDKs' exclusive() is \"default\")")
	var filters filterFlag
	fs.Var(&filters, "filter", "--stream: only records with header key matching pattern ('*' = any run), as key=pattern; repeat to AND")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	var startPos client.StreamStart
	if *stream {
		if *group != "" || *nack || *fail || *cohort != "" {
			return usagef("--group, --consumer-group, --nack and --fail apply to queues, not streams")
		}
		var err error
		if startPos, err = parseStart(*start); err != nil {
			return usagef("--start: %v", err)
		}
	} else if *start != "latest" || *durable != "" || len(filters) > 0 {
		return usagef("--start, --durable and --filter apply to streams (add --stream)")
	}
	if *topic == "" {
		return usagef("--topic is required")
	}
	if *nack && *fail {
		return usagef("--nack and --fail are exclusive")
	}
	if *autoAck && (*nack || *fail) {
		return usagef("--auto-ack deliveries are already settled: drop --nack/--fail")
	}
	if *count < 0 || *wait < 0 {
		return usagef("--count and --wait cannot be negative")
	}
	if *prefetch > 1<<32-1 {
		return usagef("--prefetch too large")
	}
	pf := uint32(*prefetch)
	if pf == 0 && *count > 0 {
		// Do not take more deliveries than will be settled: the rest would
		// wait out their lease on a session that is going away.
		pf = uint32(min(*count, client.DefaultPrefetch))
	}
	var parts []uint32
	if *partList != "" {
		for _, s := range strings.Split(*partList, ",") {
			v, err := strconv.ParseUint(strings.TrimSpace(s), 10, 32)
			if err != nil {
				return usagef("--partitions: %q is not a partition number", s)
			}
			parts = append(parts, uint32(v))
		}
	}

	stderr := &lockedWriter{w: e.stderr} // assignment notices arrive on another goroutine
	// An interrupt is how a consume without --count ends, also when it
	// comes before the subscription is open: that is not a failure. Only
	// the cancellation itself counts, not a refusal that met the signal.
	interruptedEarly := func(err error) bool {
		if ctx.Err() == nil || !errors.Is(err, context.Canceled) {
			return false
		}
		fmt.Fprintf(stderr, "interrupted before the subscription was open\n0 message(s) consumed\n")
		return true
	}
	c, err := g.dial(ctx, e)
	if err != nil {
		if interruptedEarly(err) {
			return nil
		}
		return err
	}
	defer c.Close()
	sctx, cancel := context.WithTimeout(ctx, g.timeout)
	var sub *client.Subscription
	if *stream {
		sub, err = c.SubscribeStream(sctx, *topic, client.StreamOptions{Partitions: parts, DurableName: *durable,
			Start: startPos, Filter: filters, Prefetch: pf, AutoAck: *autoAck})
	} else {
		opts := client.SubscribeOptions{Group: *group, Partitions: parts, Prefetch: pf, AutoAck: *autoAck, ConsumerGroup: *cohort}
		if *cohort != "" {
			opts.OnAssignment = func(a client.Assignment) {
				fmt.Fprintf(stderr, "consumer group %s: partitions %v assigned by %s (generation %d)\n", a.ConsumerGroup, a.Assigned, a.Broker, a.Generation)
			}
		}
		sub, err = c.Subscribe(sctx, *topic, opts)
	}
	cancel()
	if err != nil {
		if interruptedEarly(err) {
			return nil
		}
		return fmt.Errorf("subscribe to %s: %w", *topic, err)
	}
	defer sub.Close()

	settled := "ack"
	switch {
	case *autoAck:
		settled = "auto"
	case *nack:
		settled = "retry"
	case *fail:
		settled = "fail"
	}
	enc := json.NewEncoder(e.stdout)
	enc.SetEscapeHTML(false)
	got := 0
	for *count == 0 || got < *count {
		nctx, ncancel := ctx, context.CancelFunc(func() {})
		if *wait > 0 {
			nctx, ncancel = context.WithTimeout(ctx, *wait)
		}
		d, err := sub.Next(nctx)
		ncancel()
		if err != nil {
			if ctx.Err() != nil {
				break // interrupted
			}
			if errors.Is(err, context.DeadlineExceeded) {
				fmt.Fprintf(stderr, "nothing arrived for %v\n", *wait)
				break
			}
			var sce *client.SubscriptionClosedError
			if errors.As(err, &sce) && sub.Err() == nil {
				fmt.Fprintf(stderr, "warning: %v\n", err)
				continue // other partitions are still alive
			}
			return fmt.Errorf("consume %s: %w", *topic, err)
		}
		got++
		// Settle first, print after: a line on stdout means the settle was sent.
		actx, acancel := context.WithTimeout(context.WithoutCancel(ctx), g.timeout)
		switch {
		case *autoAck:
		case *nack:
			err = d.Retry(actx, 0)
		case *fail:
			err = d.Fail(actx)
		default:
			err = d.Ack(actx)
		}
		acancel()
		if err != nil {
			fmt.Fprintf(stderr, "warning: %s partition %d offset %d not settled: %v\n", settled, d.Partition, d.Offset, err)
		}
		if *asJSON {
			if err := enc.Encode(toJSON(d, settled)); err != nil {
				return err
			}
		} else {
			fmt.Fprintln(e.stdout, formatDelivery(d))
		}
	}
	fmt.Fprintf(stderr, "%d message(s) consumed\n", got)
	return nil
}

func toJSON(d *client.Delivery, settled string) deliveryJSON {
	j := deliveryJSON{
		Topic: d.Topic, Group: d.Group, Partition: d.Partition, Offset: d.Offset, Tag: d.Tag,
		Retries: d.Retries, ContentType: d.ContentType, Headers: d.Headers,
		PayloadBase64: base64.StdEncoding.EncodeToString(d.Payload), Settled: settled,
	}
	if !d.Published.IsZero() {
		t := d.Published.UTC()
		j.Published = &t
	}
	if !d.Received.IsZero() {
		t := d.Received.UTC()
		j.Received = &t
	}
	if utf8.Valid(d.Payload) {
		s := string(d.Payload)
		j.Payload = &s
	}
	return j
}

// formatDelivery is the text form: metadata, a tab, then the payload as
// is when it is printable single-line text, quoted when it is text with
// control characters, and base64 (prefixed "base64:") otherwise.
func formatDelivery(d *client.Delivery) string {
	var b strings.Builder
	fmt.Fprintf(&b, "partition=%d offset=%d", d.Partition, d.Offset)
	if d.Retries > 0 {
		fmt.Fprintf(&b, " retries=%d", d.Retries)
	}
	if d.ContentType != "" {
		fmt.Fprintf(&b, " content_type=%q", d.ContentType)
	}
	for _, k := range sortedHeaderKeys(d.Headers) {
		if k == client.RetriesHeader {
			continue
		}
		fmt.Fprintf(&b, " %s=%q", k, d.Headers[k])
	}
	b.WriteByte('\t')
	b.WriteString(payloadText(d.Payload))
	return b.String()
}

func payloadText(p []byte) string {
	if !utf8.Valid(p) {
		return "base64:" + base64.StdEncoding.EncodeToString(p)
	}
	s := string(p)
	for _, r := range s {
		if unicode.IsControl(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// filterFlag collects --filter key=pattern clauses.
type filterFlag []client.FilterClause

func (f *filterFlag) String() string { return fmt.Sprint([]client.FilterClause(*f)) }

func (f *filterFlag) Set(v string) error {
	k, p, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("want key=pattern, got %q", v)
	}
	*f = append(*f, client.FilterClause{Key: k, Pattern: p})
	return nil
}

// parseStart reads --start: earliest, latest, offset:N, back:N or
// time:RFC3339.
func parseStart(v string) (client.StreamStart, error) {
	kind, arg, _ := strings.Cut(v, ":")
	switch kind {
	case "earliest":
		return client.StartEarliest(), nil
	case "latest":
		return client.StartLatest(), nil
	case "offset", "back":
		n, err := strconv.ParseUint(arg, 10, 64)
		if err != nil {
			return client.StreamStart{}, fmt.Errorf("%s:N needs a number, got %q", kind, arg)
		}
		if kind == "offset" {
			return client.StartAt(n), nil
		}
		return client.StartBack(n), nil
	case "time":
		t, err := time.Parse(time.RFC3339Nano, arg)
		if err != nil {
			return client.StreamStart{}, fmt.Errorf("time:T needs an RFC 3339 time: %v", err)
		}
		return client.StartTime(t), nil
	}
	return client.StreamStart{}, fmt.Errorf("%q is not earliest, latest, offset:N, back:N or time:RFC3339", v)
}

// lockedWriter serialises writes from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
