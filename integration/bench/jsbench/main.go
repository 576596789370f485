// Command jsbench is the NATS JetStream load generator of the Fibril
// comparison benchmark. It is a driver for benchkit, the measurement core
// of `fibrilctl bench` (cmd/fibrilctl/benchkit): the same code stamps the
// payloads, paces, gates, tracks losses and duplicates, records latencies
// and prints the same JSON fields, so the two cannot drift apart. It is a
// module of its own so that nats.go never becomes a dependency of the
// main module. See ../README.md.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/fibrilgo/fibril/cmd/fibrilctl/benchkit"
)

func main() {
	os.Exit(run1(os.Args[1:]))
}

func run1(args []string) int {
	fs := flag.NewFlagSet("jsbench", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: jsbench [--url nats://127.0.0.1:4222] [--stream S] [--subject SUBJ] [--size B] [--producers P]\n"+
			"               [--consumers C] [--window W] [--confirmed] [--prefetch N] [--auto-ack] [--duration D]\n"+
			"               [--warmup D] [--drain D] [--rate R] [--max-ahead N] [--mode throughput|rtt]\n"+
			"               [--retention limits|workqueue] [--replicas N] [--fan-out] [--keep-stream] [--json] [--progress=false]\n\nflags:\n")
		fs.PrintDefaults()
	}
	var cfg benchkit.Config
	cfg.AddFlags(fs, map[string]string{
		"consumers": "consuming connections, all on one durable pull consumer",
		"confirmed": "JetStream publish and wait for the PubAck (default: core NATS publish, fire and forget)",
		"prefetch":  "messages buffered per consumer (PullMaxMessages); MaxAckPending = prefetch × consumers",
		"auto-ack":  "AckNone consumer (default: explicit ack of every delivery)",
		"fan-out":   "every consumer reads every message: one durable pull consumer per bench consumer (compare with fibrilctl bench --stream); needs --retention limits",
	})
	var drv driver
	fs.StringVar(&drv.URL, "url", "nats://127.0.0.1:4222", "NATS server URL")
	fs.StringVar(&drv.Stream, "stream", "", "stream to create (default: a fresh JSBENCH_<ns>)")
	fs.StringVar(&drv.Subject, "subject", "", "the stream's subject (default: jsbench.<ns>)")
	fs.StringVar(&drv.Retention, "retention", "limits", "stream retention: limits (acked messages stay, as a log) or workqueue (acked messages are removed)")
	fs.IntVar(&drv.Replicas, "replicas", 1, "the stream's replicas: 1 on a single server, up to the cluster's size (3 for R3 on a 3-node cluster)")
	partitions := fs.Int("partitions", 1, "accepted for symmetry with fibrilctl bench; a stream is one partition")
	fs.BoolVar(&drv.KeepStream, "keep-stream", false, "leave the stream on the server at the end (default: delete it)")
	asJSON := fs.Bool("json", false, "print exactly one JSON object on stdout")
	progress := fs.Bool("progress", true, "print progress to stderr once a second")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "jsbench: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *partitions != 1 {
		fmt.Fprintln(os.Stderr, "jsbench: warning: a JetStream stream has no partitions; --partitions ignored")
	}
	ns := time.Now().UnixNano()
	if drv.Stream == "" {
		drv.Stream = fmt.Sprintf("JSBENCH_%d", ns)
	}
	if drv.Subject == "" {
		drv.Subject = fmt.Sprintf("jsbench.%d", ns)
	}
	switch drv.Retention {
	case "", "limits":
		drv.Retention = "limits"
	case "workqueue":
	default:
		fmt.Fprintf(os.Stderr, "jsbench: --retention must be limits or workqueue, not %q\n", drv.Retention)
		return 2
	}
	if cfg.FanOut && drv.Retention == "workqueue" {
		fmt.Fprintln(os.Stderr, "jsbench: --fan-out needs --retention limits (a work queue gives each message to one consumer)")
		return 2
	}
	if drv.Replicas < 1 || drv.Replicas > 5 {
		// JetStream allows 1 to 5 replicas.
		fmt.Fprintf(os.Stderr, "jsbench: --replicas must be 1 to 5, not %d\n", drv.Replicas)
		return 2
	}
	cfg.Log = os.Stderr
	if *progress {
		cfg.Progress = os.Stderr
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "jsbench:", err)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { // a second signal kills
		<-ctx.Done()
		stop()
	}()
	res, err := benchkit.Run(ctx, cfg, &drv)
	if res != nil {
		if *asJSON {
			if err := json.NewEncoder(os.Stdout).Encode(result{res, drv.info}); err != nil {
				fmt.Fprintln(os.Stderr, "jsbench:", err)
				return 1
			}
		} else {
			res.WriteTable(os.Stdout)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "jsbench:", err)
		return 1
	}
	return 0
}
