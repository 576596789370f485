package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
)

// The queues command: the admin API's queues and streams
// (/admin/api/queues), as tables for people and JSON for scripts.

// queueEntry is one queue or stream as GET /admin/api/queues answers it
// (the fields the tables show; --json prints the answer as it came).
type queueEntry struct {
	Kind           string `json:"kind"`
	Topic          string `json:"topic"`
	Group          string `json:"group"`
	PartitionCount uint32 `json:"partition_count"`
	DLQ            *struct {
		Policy string `json:"policy"`
		Topic  string `json:"topic"`
		Group  string `json:"group"`
	} `json:"dlq"`
	MaxRetries   *uint32 `json:"max_retries"`
	DefaultTTLMS *uint64 `json:"default_ttl_ms"`
	Durability   string  `json:"durability"`
	Retention    *struct {
		MaxAgeMS   *uint64 `json:"max_age_ms"`
		MaxBytes   *uint64 `json:"max_bytes"`
		MaxRecords *uint64 `json:"max_records"`
	} `json:"retention"`
	Totals struct {
		Ready        uint64  `json:"ready"`
		Inflight     uint64  `json:"inflight"`
		Delayed      uint64  `json:"delayed"`
		DeadLettered uint64  `json:"dead_lettered"`
		Records      uint64  `json:"records"`
		Consumers    int     `json:"consumers"`
		Bytes        int64   `json:"bytes"`
		PublishRate  float64 `json:"publish_rate"`
		DeliverRate  float64 `json:"deliver_rate"`
		Unreported   int     `json:"unreported"`
	} `json:"totals"`
	Partitions []struct {
		Partition   uint32 `json:"partition"`
		Owner       string `json:"owner"`
		Unavailable string `json:"unavailable"`
		Queue       *struct {
			Ready        uint64 `json:"ready"`
			Inflight     uint64 `json:"inflight"`
			Delayed      uint64 `json:"delayed"`
			DeadLettered uint64 `json:"dead_lettered"`
			Bytes        int64  `json:"bytes"`
			Consumers    []struct {
				Prefetch  uint32 `json:"prefetch"`
				Unsettled int    `json:"unsettled"`
			} `json:"consumers"`
		} `json:"queue"`
		Stream *struct {
			First       uint64            `json:"first_offset"`
			Next        uint64            `json:"next_offset"`
			Bytes       int64             `json:"bytes"`
			Subscribers int               `json:"subscribers"`
			Cursors     map[string]uint64 `json:"cursors"`
		} `json:"stream"`
		Followers []struct {
			Node       string  `json:"node"`
			Live       bool    `json:"live"`
			InSync     bool    `json:"in_sync"`
			LagRecords *uint64 `json:"lag_records"`
		} `json:"followers"`
	} `json:"partitions"`
}

func runQueues(ctx context.Context, g *globals, e *env, args []string) error {
	fs := newFlagSet("queues", "ls [--streams] | describe TOPIC [--group G] | messages TOPIC [--partition N] [--from O] [--limit L] [--status S]\n"+
		"       | purge TOPIC [--group G] [--yes] | delete TOPIC [--group G] [--force] [--yes] | replay DLQ_TOPIC [--offsets O,..|--all] [--settle]\n"+
		"       | limit TOPIC [--group G] (--max-messages N [--overflow reject_publish|drop_oldest] | --remove)", g, e)
	asJSON := fs.Bool("json", false, "print the admin API's JSON answer")
	group := fs.String("group", "", "describe, purge: the queue's group")
	streams := fs.Bool("streams", false, "ls: streams only")
	yes := fs.Bool("yes", false, "purge, delete: do not ask for confirmation")
	force := fs.Bool("force", false, "delete: even with messages in flight")
	partition := fs.Int("partition", -1, "messages: the partition (default 0); replay: only this partition of the DLQ")
	from := fs.Uint64("from", 0, "messages: the first offset to look at")
	limit := fs.Int("limit", 50, "messages: most messages shown (at most 5000)")
	status := fs.String("status", "", "messages: comma-separated states (ready, inflight, delayed, pending_dlq, settled) or active (default)")
	offsets := fs.String("offsets", "", "replay: comma-separated offsets of one DLQ partition (at most 100)")
	all := fs.Bool("all", false, "replay: every active dead letter")
	settle := fs.Bool("settle", false, "replay: remove each dead letter once its copy is confirmed")
	maxMessages := fs.Int64("max-messages", 0, "limit: most unsettled messages per partition")
	overflow := fs.String("overflow", "reject_publish", "limit: what a publish to a full partition does: reject_publish or drop_oldest")
	remove := fs.Bool("remove", false, "limit: remove the queue's limit")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("queues needs a subcommand: ls, describe TOPIC or purge TOPIC")
	}
	a, err := g.adminClient(e)
	if err != nil {
		return err
	}
	sub, pos := pos[0], pos[1:]
	switch sub {
	case "ls", "list":
		if len(pos) > 0 {
			return usagef("queues ls takes no argument")
		}
		path := "/admin/api/queues"
		if *streams {
			path = "/admin/api/streams"
		}
		return listQueues(ctx, a, e, path, *asJSON, false)
	case "describe", "show":
		if len(pos) != 1 {
			return usagef("queues describe takes exactly one TOPIC")
		}
		path := "/admin/api/queues/" + url.PathEscape(pos[0])
		if *group != "" {
			path += "?group=" + url.QueryEscape(*group)
		}
		return listQueues(ctx, a, e, path, *asJSON, true)
	case "purge":
		if len(pos) != 1 {
			return usagef("queues purge takes exactly one TOPIC")
		}
		return purgeQueue(ctx, a, e, pos[0], *group, *yes, *asJSON)
	case "messages", "peek":
		if len(pos) != 1 {
			return usagef("queues messages takes exactly one TOPIC")
		}
		v := url.Values{"topic": {pos[0]}, "from": {strconv.FormatUint(*from, 10)}, "limit": {strconv.Itoa(*limit)}}
		if *group != "" {
			v.Set("group", *group)
		}
		if *partition >= 0 {
			v.Set("partition", strconv.Itoa(*partition))
		}
		if *status != "" {
			v.Set("status", *status)
		}
		return listMessages(ctx, a, e, "/admin/api/messages?"+v.Encode(), *asJSON)
	case "replay":
		if len(pos) != 1 {
			return usagef("queues replay takes exactly one DLQ_TOPIC")
		}
		req := map[string]any{"dlq_topic": pos[0], "dlq_group": *group, "all": *all, "settle": *settle}
		if *partition >= 0 {
			req["partition"] = *partition
		}
		if *offsets != "" {
			var offs []uint64
			for _, s := range strings.Split(*offsets, ",") {
				o, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
				if err != nil {
					return usagef("--offsets: %q is not an offset", s)
				}
				offs = append(offs, o)
			}
			req["offsets"] = offs
		}
		if *all == (*offsets != "") {
			return usagef("queues replay needs --offsets or --all (not both)")
		}
		return replayDLQ(ctx, a, e, req, *asJSON)
	case "limit":
		if len(pos) != 1 {
			return usagef("queues limit takes exactly one TOPIC")
		}
		if *remove == (*maxMessages > 0) {
			return usagef("queues limit needs --max-messages N or --remove")
		}
		return setQueueLimit(ctx, a, e, pos[0], *group, *maxMessages, *overflow, *remove)
	case "delete", "rm":
		if len(pos) != 1 {
			return usagef("queues delete takes exactly one TOPIC")
		}
		return deleteTopic(ctx, a, e, pos[0], *group, *force, *yes, *asJSON)
	}
	return usagef("unknown queues subcommand %q (ls, describe, messages, purge, delete, replay, limit)", sub)
}

func listQueues(ctx context.Context, a *adminClient, e *env, path string, asJSON, detail bool) error {
	var raw json.RawMessage
	if err := a.do(ctx, http.MethodGet, path, nil, &raw); err != nil {
		return err
	}
	if asJSON {
		return printIndented(e, raw)
	}
	var out struct {
		Queues []queueEntry `json:"queues"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return fmt.Errorf("admin API: malformed answer: %w", err)
	}
	if !detail {
		tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "KIND\tTOPIC\tGROUP\tPARTITIONS\tREADY\tIN FLIGHT\tDELAYED\tRECORDS\tCONSUMERS\tPUBLISH/S\tDELIVER/S\tSIZE")
		unreported := 0
		for _, q := range out.Queues {
			t := q.Totals
			ready, inflight, delayed, records := strconv.FormatUint(t.Ready, 10), strconv.FormatUint(t.Inflight, 10), strconv.FormatUint(t.Delayed, 10), "-"
			if q.Kind == "stream" {
				ready, inflight, delayed, records = "-", "-", "-", strconv.FormatUint(t.Records, 10)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%d\t%.1f\t%.1f\t%s\n", q.Kind, q.Topic, dash(q.Group), q.PartitionCount,
				ready, inflight, delayed, records, t.Consumers, t.PublishRate, t.DeliverRate, humanBytes(t.Bytes))
			unreported += t.Unreported
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if unreported > 0 {
			fmt.Fprintf(e.stdout, "\n%d partitions without numbers (owner down or unreachable): see `queues describe TOPIC`\n", unreported)
		}
		return nil
	}
	for i, q := range out.Queues {
		if i > 0 {
			fmt.Fprintln(e.stdout)
		}
		describeQueue(e, q)
	}
	return nil
}

func describeQueue(e *env, q queueEntry) {
	name := q.Topic
	if q.Group != "" {
		name += " (group " + q.Group + ")"
	}
	fmt.Fprintf(e.stdout, "%s %s: %d partitions\n", q.Kind, name, q.PartitionCount)
	if q.Kind == "queue" {
		dlq := "broker default"
		if q.DLQ != nil {
			dlq = q.DLQ.Policy
			if q.DLQ.Topic != "" {
				dlq += " → " + q.DLQ.Topic
				if q.DLQ.Group != "" {
					dlq += "/" + q.DLQ.Group
				}
			}
		}
		retries := "-"
		if q.MaxRetries != nil {
			retries = strconv.FormatUint(uint64(*q.MaxRetries), 10)
		}
		ttl := "none"
		if q.DefaultTTLMS != nil {
			ttl = strconv.FormatUint(*q.DefaultTTLMS, 10) + " ms"
		}
		fmt.Fprintf(e.stdout, "  dead letters: %s, max retries %s, default TTL %s\n", dlq, retries, ttl)
		fmt.Fprintf(e.stdout, "  ready %d, in flight %d, delayed %d, dead-lettered %d, consumers %d, %.1f published/s, %.1f delivered/s, %s\n",
			q.Totals.Ready, q.Totals.Inflight, q.Totals.Delayed, q.Totals.DeadLettered, q.Totals.Consumers, q.Totals.PublishRate, q.Totals.DeliverRate, humanBytes(q.Totals.Bytes))
	} else {
		var ret []string
		if r := q.Retention; r != nil {
			if r.MaxAgeMS != nil {
				ret = append(ret, fmt.Sprintf("max age %d ms", *r.MaxAgeMS))
			}
			if r.MaxBytes != nil {
				ret = append(ret, "max "+humanBytes(int64(*r.MaxBytes)))
			}
			if r.MaxRecords != nil {
				ret = append(ret, fmt.Sprintf("max %d records", *r.MaxRecords))
			}
		}
		if len(ret) == 0 {
			ret = []string{"unbounded"}
		}
		fmt.Fprintf(e.stdout, "  durability %s, retention %s\n", q.Durability, strings.Join(ret, ", "))
		fmt.Fprintf(e.stdout, "  records %d, subscribers %d, %.1f published/s, %.1f delivered/s, %s\n",
			q.Totals.Records, q.Totals.Consumers, q.Totals.PublishRate, q.Totals.DeliverRate, humanBytes(q.Totals.Bytes))
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	if q.Kind == "queue" {
		fmt.Fprintln(tw, "  PARTITION\tOWNER\tREADY\tIN FLIGHT\tDELAYED\tCONSUMERS (PREFETCH/UNSETTLED)\tFOLLOWERS\tSIZE")
	} else {
		fmt.Fprintln(tw, "  PARTITION\tOWNER\tOFFSETS\tSUBSCRIBERS\tCURSORS\tFOLLOWERS\tSIZE")
	}
	for _, p := range q.Partitions {
		var fol []string
		for _, f := range p.Followers {
			s := f.Node
			if f.InSync {
				s += "*"
			}
			if !f.Live {
				s += "(dead)"
			}
			if f.LagRecords != nil {
				s += fmt.Sprintf("(lag=%d)", *f.LagRecords)
			}
			fol = append(fol, s)
		}
		follow := dash(strings.Join(fol, ","))
		owner := dash(p.Owner)
		switch {
		case p.Queue != nil:
			var cs []string
			for _, c := range p.Queue.Consumers {
				cs = append(cs, fmt.Sprintf("%d/%d", c.Prefetch, c.Unsettled))
			}
			fmt.Fprintf(tw, "  %d\t%s\t%d\t%d\t%d\t%s\t%s\t%s\n", p.Partition, owner, p.Queue.Ready, p.Queue.Inflight, p.Queue.Delayed,
				dash(strings.Join(cs, " ")), follow, humanBytes(p.Queue.Bytes))
		case p.Stream != nil:
			var cs []string
			for n, c := range p.Stream.Cursors {
				cs = append(cs, fmt.Sprintf("%s@%d", n, c))
			}
			fmt.Fprintf(tw, "  %d\t%s\t[%d,%d)\t%d\t%s\t%s\t%s\n", p.Partition, owner, p.Stream.First, p.Stream.Next, p.Stream.Subscribers,
				dash(strings.Join(cs, " ")), follow, humanBytes(p.Stream.Bytes))
		default:
			fmt.Fprintf(tw, "  %d\t%s\t(%s)\n", p.Partition, owner, p.Unavailable)
		}
	}
	_ = tw.Flush()
}

func purgeQueue(ctx context.Context, a *adminClient, e *env, topic, group string, yes, asJSON bool) error {
	name := topic
	if group != "" {
		name += " (group " + group + ")"
	}
	if !yes {
		fmt.Fprintf(e.stderr, "purge queue %s: every ready and delayed message is dropped (in-flight ones stay until settled). Type the topic name to confirm: ", name)
		line, err := readLine(ctx, e)
		if err != nil {
			return err
		}
		if strings.TrimSpace(line) != topic {
			return fmt.Errorf("not confirmed: nothing purged (use --yes in scripts)")
		}
	}
	fmt.Fprintf(e.stderr, "purging %s on every partition's owner…\n", name)
	var raw json.RawMessage
	if err := a.do(ctx, http.MethodPost, "/admin/api/queues/purge", map[string]string{"topic": topic, "group": group}, &raw); err != nil {
		return err
	}
	if asJSON {
		return printIndented(e, raw)
	}
	var out struct {
		Purged     uint64 `json:"purged"`
		Failed     int    `json:"failed_partitions"`
		Partitions []struct {
			Partition uint32 `json:"partition"`
			Purged    uint64 `json:"purged"`
			Error     string `json:"error"`
		} `json:"partitions"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return fmt.Errorf("admin API: malformed answer: %w", err)
	}
	fmt.Fprintf(e.stdout, "purged %d messages from %s\n", out.Purged, name)
	for _, p := range out.Partitions {
		if p.Error != "" {
			fmt.Fprintf(e.stdout, "  partition %d: %s\n", p.Partition, p.Error)
		}
	}
	if out.Failed > 0 {
		return fmt.Errorf("%d partitions were not purged", out.Failed)
	}
	return nil
}

// deleteTopic deletes a queue or a stream, whichever the topic is.
func deleteTopic(ctx context.Context, a *adminClient, e *env, topic, group string, force, yes, asJSON bool) error {
	path := "/admin/api/queues/" + url.PathEscape(topic)
	if group != "" {
		path += "?group=" + url.QueryEscape(group)
	}
	var found struct {
		Queues []queueEntry `json:"queues"`
	}
	if err := a.do(ctx, http.MethodGet, path, nil, &found); err != nil {
		return err
	}
	var q *queueEntry
	for i := range found.Queues {
		if found.Queues[i].Group == group {
			q = &found.Queues[i]
		}
	}
	if q == nil {
		return fmt.Errorf("queue %s has no group %q", topic, group)
	}
	name := q.Kind + " " + topic
	if group != "" {
		name += " (group " + group + ")"
	}
	if !yes {
		fmt.Fprintf(e.stderr, "delete %s: its %d partitions and everything in them go, subscribers are told topic_deleted. Type the topic name to confirm: ", name, q.PartitionCount)
		line, err := readLine(ctx, e)
		if err != nil {
			return err
		}
		if strings.TrimSpace(line) != topic {
			return fmt.Errorf("not confirmed: nothing deleted (use --yes in scripts)")
		}
	}
	body := map[string]any{"topic": topic}
	endpoint := "/admin/api/streams/delete"
	if q.Kind == "queue" {
		endpoint = "/admin/api/queues/delete"
		body["group"], body["force"] = group, force
	}
	var raw json.RawMessage
	if err := a.do(ctx, http.MethodPost, endpoint, body, &raw); err != nil {
		return err
	}
	if asJSON {
		return printIndented(e, raw)
	}
	var out struct {
		Deleted struct {
			Partitions int    `json:"partitions"`
			Messages   uint64 `json:"messages"`
			Records    uint64 `json:"records"`
		} `json:"deleted"`
		Closed int `json:"subscriptions_closed"`
		// In a cluster: the brokers that have not confirmed yet.
		Complete *bool    `json:"complete"`
		Pending  []string `json:"pending"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return fmt.Errorf("admin API: malformed answer: %w", err)
	}
	what := fmt.Sprintf("%d messages", out.Deleted.Messages)
	if q.Kind == "stream" {
		what = fmt.Sprintf("%d records", out.Deleted.Records)
	}
	fmt.Fprintf(e.stdout, "deleted %s: %d partitions, %s, %d subscriptions closed\n", name, out.Deleted.Partitions, what, out.Closed)
	if out.Complete != nil && !*out.Complete {
		fmt.Fprintf(e.stdout, "waiting for %s to drop their copy (they are down or slow); the name can be declared again once they have\n",
			strings.Join(out.Pending, ", "))
	}
	return nil
}

func printIndented(e *env, raw json.RawMessage) error {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return fmt.Errorf("admin API: malformed answer: %w", err)
	}
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// humanBytes prints a size in binary units.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// readLine reads one line of stdin (a confirmation). ctx ending (Ctrl-C)
// abandons the read.
func readLine(ctx context.Context, e *env) (string, error) {
	type result struct {
		line string
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		line, err := bufio.NewReader(e.stdin).ReadString('\n')
		if err == io.EOF {
			err = nil
		}
		ch <- result{strings.TrimRight(line, "\r\n"), err}
	}()
	select {
	case r := <-ch:
		return r.line, r.err
	case <-ctx.Done():
		return "", fmt.Errorf("confirmation interrupted: %w", ctx.Err())
	}
}

// listMessages prints a page of GET /admin/api/messages: one line per
// message, its dead-letter origin when it has one.
func listMessages(ctx context.Context, a *adminClient, e *env, path string, asJSON bool) error {
	var raw json.RawMessage
	if err := a.do(ctx, http.MethodGet, path, nil, &raw); err != nil {
		return err
	}
	if asJSON {
		return printIndented(e, raw)
	}
	var page struct {
		Next     uint64 `json:"next"`
		Messages []struct {
			Offset      uint64 `json:"offset"`
			State       string `json:"state"`
			Retries     uint32 `json:"retries"`
			ContentType string `json:"content_type"`
			PayloadSize int    `json:"payload_size"`
			Payload     []byte `json:"payload"`
			DLQ         *struct {
				SourceTopic  string `json:"source_topic"`
				SourceGroup  string `json:"source_group"`
				SourceOffset string `json:"source_offset"`
				Reason       string `json:"reason"`
			} `json:"dlq"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(raw, &page); err != nil {
		return fmt.Errorf("admin API: malformed answer: %w", err)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "OFFSET\tSTATE\tRETRIES\tSIZE\tDEAD-LETTERED FROM\tPAYLOAD")
	for _, m := range page.Messages {
		from := "-"
		if d := m.DLQ; d != nil {
			from = d.SourceTopic
			if d.SourceGroup != "" {
				from += "/" + d.SourceGroup
			}
			from += "@" + d.SourceOffset + " (" + d.Reason + ")"
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%s\t%s\n", m.Offset, m.State, m.Retries, m.PayloadSize, from, preview(m.Payload, m.PayloadSize))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "next page: --from %d\n", page.Next)
	return nil
}

// preview shows a payload as text when it is printable, else its size.
func preview(p []byte, size int) string {
	const max = 60
	s := string(p)
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == 0xfffd {
			return fmt.Sprintf("(%d bytes, binary)", size)
		}
	}
	if len(s) > max || size > len(p) {
		return strconv.Quote(s[:min(len(s), max)]) + "…"
	}
	return strconv.Quote(s)
}

// replayDLQ runs POST /admin/api/dlq/replay and prints the counts and
// what was skipped.
func replayDLQ(ctx context.Context, a *adminClient, e *env, req map[string]any, asJSON bool) error {
	fmt.Fprintf(e.stderr, "replaying dead letters of %s; each copy waits for its confirm…\n", req["dlq_topic"])
	var raw json.RawMessage
	if err := a.do(ctx, http.MethodPost, "/admin/api/dlq/replay", req, &raw); err != nil {
		return err
	}
	if asJSON {
		return printIndented(e, raw)
	}
	var out struct {
		Replayed int  `json:"replayed_count"`
		Skipped  int  `json:"skipped_count"`
		More     bool `json:"more"`
		Skips    []struct {
			Partition uint32 `json:"partition"`
			Offset    uint64 `json:"offset"`
			Reason    string `json:"reason"`
		} `json:"skipped"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return fmt.Errorf("admin API: malformed answer: %w", err)
	}
	fmt.Fprintf(e.stdout, "replayed %d, skipped %d\n", out.Replayed, out.Skipped)
	for _, s := range out.Skips {
		fmt.Fprintf(e.stdout, "  partition %d offset %d: %s\n", s.Partition, s.Offset, s.Reason)
	}
	if out.More {
		fmt.Fprintln(e.stdout, "more dead letters remain: run it again")
	}
	return nil
}

// setQueueLimit changes one entry of the runtime settings' limits group
// (docs/admin.md#limits): read the document, replace or remove the
// queue's entry, write it back with the version read (a concurrent change
// elsewhere makes it fail with 409 rather than be lost).
func setQueueLimit(ctx context.Context, a *adminClient, e *env, topic, group string, max int64, overflow string, remove bool) error {
	var cur struct {
		Version  uint64         `json:"version"`
		Settings map[string]any `json:"settings"`
	}
	if err := a.do(ctx, http.MethodGet, "/admin/api/runtime-settings", nil, &cur); err != nil {
		return err
	}
	limits, _ := cur.Settings["limits"].(map[string]any)
	if limits == nil {
		limits = map[string]any{}
	}
	old, _ := limits["queues"].([]any)
	queues := []any{}
	found := false
	for _, q := range old {
		m, _ := q.(map[string]any)
		g, _ := m["group"].(string)
		if m["topic"] == topic && g == group {
			found = true
			continue
		}
		queues = append(queues, q)
	}
	if remove && !found {
		return fmt.Errorf("queue %s has no limit", topic)
	}
	if !remove {
		entry := map[string]any{"topic": topic, "max_messages_per_partition": max, "overflow": overflow}
		if group != "" {
			entry["group"] = group
		}
		queues = append(queues, entry)
	}
	limits["queues"] = queues
	cur.Settings["limits"] = limits
	delete(cur.Settings, "version")
	var out struct {
		Version uint64 `json:"version"`
	}
	if err := a.do(ctx, http.MethodPut, "/admin/api/runtime-settings", map[string]any{"expected_version": cur.Version, "settings": cur.Settings}, &out); err != nil {
		return err
	}
	name := topic
	if group != "" {
		name += " (group " + group + ")"
	}
	if remove {
		fmt.Fprintf(e.stdout, "queue %s: no limit (settings version %d)\n", name, out.Version)
	} else {
		fmt.Fprintf(e.stdout, "queue %s: at most %d messages per partition, overflow %s (settings version %d)\n", name, max, overflow, out.Version)
	}
	return nil
}
