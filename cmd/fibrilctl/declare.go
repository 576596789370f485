package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/wire"
)

func runDeclare(ctx context.Context, g *globals, e *env, args []string) error {
	fs := newFlagSet("declare", "--topic T [--group G] [--partitions N] [--dlq discard|broker|named:TOPIC[/GROUP]] [--max-retries N] [--ttl D]\n       fibrilctl declare --stream --topic T [--partitions N] [--durability D] [--max-age D] [--max-bytes N] [--max-records N]", g, e)
	topic := fs.String("topic", "", "topic to declare (required)")
	group := fs.String("group", "", "queue namespace inside the topic (default namespace when empty)")
	parts := fs.Uint("partitions", 0, "partition count (0 = broker default)")
	dlq := fs.String("dlq", "", "dead-letter policy: discard, broker, or named:TOPIC[/GROUP] (default: broker default)")
	maxRetries := fs.Int("max-retries", -1, "redeliveries before dead-lettering (-1 = broker default)")
	ttl := fs.Duration("ttl", 0, "default time to live of messages published without one (0 = none)")
	stream := fs.Bool("stream", false, "declare a stream instead of a queue")
	durability := fs.String("durability", "durable", "stream storage tier: durable, speculative or ephemeral")
	maxAge := fs.Duration("max-age", 0, "stream retention by age (0 = unbounded)")
	maxBytes := fs.Uint64("max-bytes", 0, "stream retention by size (0 = unbounded)")
	maxRecords := fs.Uint64("max-records", 0, "stream retention by record count (0 = unbounded)")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	if *topic == "" {
		return usagef("--topic is required")
	}
	if *parts > 1<<32-1 {
		return usagef("--partitions too large")
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	if *stream {
		for _, q := range []string{"group", "dlq", "max-retries", "ttl"} {
			if set[q] {
				return usagef("--%s applies to queues, not streams", q)
			}
		}
		spec := client.StreamSpec{Topic: *topic, Partitions: uint32(*parts), MaxAge: *maxAge, MaxBytes: *maxBytes, MaxRecords: *maxRecords}
		switch *durability {
		case "durable":
			spec.Durability = client.DurabilityDurable
		case "speculative":
			spec.Durability = client.DurabilitySpeculative
		case "ephemeral":
			spec.Durability = client.DurabilityEphemeral
		default:
			return usagef("--durability must be durable, speculative or ephemeral, not %q", *durability)
		}
		c, err := g.dial(ctx, e)
		if err != nil {
			return err
		}
		defer c.Close()
		rctx, cancel := context.WithTimeout(ctx, g.timeout)
		defer cancel()
		n, err := c.DeclareStream(rctx, spec)
		if err != nil {
			return fmt.Errorf("declare stream %s: %w", *topic, err)
		}
		fmt.Fprintf(e.stdout, "stream %s: %d partitions\n", *topic, n)
		return nil
	}

	for _, s := range []string{"durability", "max-age", "max-bytes", "max-records"} {
		if set[s] {
			return usagef("--%s applies to streams (add --stream)", s)
		}
	}
	spec := client.QueueSpec{Topic: *topic, Group: *group, Partitions: uint32(*parts), DefaultTTL: *ttl}
	if *ttl < 0 || (*ttl > 0 && *ttl < time.Millisecond) {
		return usagef("--ttl must be at least 1ms")
	}
	if *dlq != "" {
		p, err := parseDLQ(*dlq)
		if err != nil {
			return err
		}
		spec.DLQ = p
	}
	if *maxRetries >= 0 {
		v := uint32(*maxRetries)
		spec.MaxRetries = &v
	}
	c, err := g.dial(ctx, e)
	if err != nil {
		return err
	}
	defer c.Close()
	rctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	n, err := c.DeclareQueue(rctx, spec)
	if err != nil {
		return fmt.Errorf("declare queue %s: %w", *topic, err)
	}
	name := *topic
	if *group != "" {
		name += " (group " + *group + ")"
	}
	fmt.Fprintf(e.stdout, "queue %s: %d partitions\n", name, n)
	return nil
}

// parseDLQ reads discard | broker | named:TOPIC[/GROUP].
func parseDLQ(s string) (*client.DLQPolicy, error) {
	switch {
	case s == "discard":
		return &client.DLQPolicy{Kind: wire.DLQDiscard}, nil
	case s == "broker":
		return &client.DLQPolicy{Kind: wire.DLQBrokerDLQ}, nil
	case strings.HasPrefix(s, "named:"):
		t := strings.TrimPrefix(s, "named:")
		topic, group, _ := strings.Cut(t, "/")
		if topic == "" {
			return nil, usagef("--dlq named: needs a topic (named:TOPIC[/GROUP])")
		}
		return &client.DLQPolicy{Kind: wire.DLQNamed, Topic: topic, Group: group}, nil
	}
	return nil, usagef("--dlq must be discard, broker or named:TOPIC[/GROUP], not %q", s)
}
