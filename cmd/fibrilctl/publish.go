package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/wire"
)

// maxStdin bounds a message read from stdin.
const maxStdin = 64 << 20

func runPublish(ctx context.Context, g *globals, e *env, args []string) error {
	fs := newFlagSet("publish", "--topic T [--group G] [--partition N | --key K] [--header k=v]... [--content-type M] [--ttl D] [--delay D] [--no-confirm] [--count N] [--lines] [MESSAGE | -]", g, e)
	topic := fs.String("topic", "", "topic to publish to (required)")
	group := fs.String("group", "", "queue namespace inside the topic")
	partition := fs.Int64("partition", -1, "partition to publish to (default: by --key, else round-robin when the partition count is known, else 0)")
	key := fs.String("key", "", "partition key (FNV-1a picks the partition; also sent as partition_key)")
	var hdrs stringList
	fs.Var(&hdrs, "header", "header `k=v` (repeatable)")
	ctype := fs.String("content-type", "", "MIME content type, e.g. application/json")
	ttl := fs.Duration("ttl", 0, "time to live from broker receipt (0 = queue default)")
	delay := fs.Duration("delay", 0, "keep the message undeliverable for this long")
	noConfirm := fs.Bool("no-confirm", false, "fire and forget: do not wait for PUBLISH_OK")
	count := fs.Int("count", 1, "publish the message this many times")
	lines := fs.Bool("lines", false, "publish every line of stdin as its own message")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if *topic == "" {
		return usagef("--topic is required")
	}
	if len(pos) > 1 {
		return usagef("one MESSAGE at most (got %d arguments); quote it or use stdin", len(pos))
	}
	if *count < 1 {
		return usagef("--count must be at least 1")
	}
	if *ttl != 0 && *delay != 0 {
		return usagef("--ttl and --delay cannot be combined (delayed messages carry no TTL)")
	}
	if *ttl < 0 || *delay < 0 {
		return usagef("--ttl and --delay cannot be negative")
	}
	keySet := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "key" {
			keySet = true
		}
	})
	if keySet && *partition >= 0 {
		return usagef("--partition and --key are exclusive")
	}
	if *partition > 1<<32-1 {
		return usagef("--partition too large")
	}
	headers := map[string]string{}
	for _, h := range hdrs {
		k, v, ok := strings.Cut(h, "=")
		if !ok || k == "" {
			return usagef("--header wants k=v, got %q", h)
		}
		headers[k] = v
	}

	// The messages: the argument, or stdin (whole, or line by line).
	var payloads [][]byte
	switch {
	case len(pos) == 1 && pos[0] != "-":
		if *lines {
			return usagef("--lines reads stdin; do not pass a MESSAGE")
		}
		payloads = [][]byte{[]byte(pos[0])}
	case *lines:
		sc := bufio.NewScanner(e.stdin)
		sc.Buffer(make([]byte, 64<<10), maxStdin)
		for sc.Scan() {
			payloads = append(payloads, bytes.Clone(sc.Bytes()))
		}
		if err := sc.Err(); err != nil {
			return fmt.Errorf("read stdin: %w", err)
		}
	default:
		b, err := io.ReadAll(io.LimitReader(e.stdin, maxStdin+1))
		if err != nil {
			return fmt.Errorf("read stdin: %w", err)
		}
		if len(b) > maxStdin {
			return fmt.Errorf("stdin holds more than %d bytes", maxStdin)
		}
		payloads = [][]byte{b}
	}

	c, err := g.dial(ctx, e)
	if err != nil {
		return err
	}
	defer c.Close()

	// Pick partitions the way the client would, so that each confirmed
	// offset can be printed with its partition: explicit, else 0 when the
	// count is unknown (a standalone broker lists no queue) or 1, else the
	// key's hash, else round-robin.
	n := uint32(0)
	if *partition < 0 {
		tctx, cancel := context.WithTimeout(ctx, g.timeout)
		topo, err := c.Topology(tctx, *topic)
		cancel()
		if err != nil {
			return fmt.Errorf("topology: %w", err)
		}
		for _, q := range topo.Queues {
			if q.Topic == *topic && q.Group == *group {
				n = q.PartitionCount
				break
			}
		}
	}
	pub := c.Publisher(*topic, client.PublisherOptions{Group: *group})
	total := 0
	for i := 0; i < *count; i++ {
		for _, payload := range payloads {
			m := client.Message{Payload: payload, ContentType: *ctype, TTL: *ttl}
			if len(headers) > 0 {
				m.Headers = headers
			}
			var p uint32
			switch {
			case *partition >= 0:
				p = uint32(*partition)
			case n <= 1:
				p = 0
			case keySet:
				p = wire.PartitionForKey([]byte(*key), n)
			default:
				p = uint32(total) % n
			}
			m.Partition = &p
			if keySet {
				m.Key = []byte(*key)
			}
			rctx, cancel := context.WithTimeout(ctx, g.timeout)
			var off uint64
			switch {
			case *delay > 0:
				off, err = pub.PublishDelayed(rctx, m, time.Now().Add(*delay), !*noConfirm)
			case *noConfirm:
				err = pub.Publish(rctx, m)
			default:
				off, err = pub.PublishConfirmed(rctx, m)
			}
			cancel()
			if err != nil {
				if total > 0 {
					fmt.Fprintf(e.stderr, "%d message(s) published before the failure\n", total)
				}
				return fmt.Errorf("publish to %s partition %d: %w", *topic, p, err)
			}
			total++
			if !*noConfirm {
				fmt.Fprintf(e.stdout, "partition=%d offset=%d\n", p, off)
			}
		}
	}
	if *noConfirm {
		fmt.Fprintf(e.stderr, "%d message(s) written (unconfirmed)\n", total)
	}
	return nil
}
