// Command jsbench is the NATS JetStream load generator of the Fibril
// comparison benchmark. It measures the way `fibrilctl bench` does (same
// payload stamp, windowed confirmed publishers, acking consumers, paced
// open loop without coordinated omission, exact loss and duplicate
// accounting) and prints the same JSON fields, so that the two can be put
// side by side. See ../README.md.
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
			"               [--retention limits|workqueue] [--keep-stream] [--json] [--progress=false]\n\nflags:\n")
		fs.PrintDefaults()
	}
	var cfg Config
	fs.StringVar(&cfg.URL, "url", "nats://127.0.0.1:4222", "NATS server URL")
	fs.StringVar(&cfg.Stream, "stream", "", "stream to create (default: a fresh JSBENCH_<ns>)")
	fs.StringVar(&cfg.Subject, "subject", "", "the stream's subject (default: jsbench.<ns>)")
	fs.StringVar(&cfg.Retention, "retention", "limits", "stream retention: limits (acked messages stay, as a log) or workqueue (acked messages are removed)")
	partitions := fs.Int("partitions", 1, "accepted for symmetry with fibrilctl bench; a stream is one partition")
	fs.IntVar(&cfg.Size, "size", 1024, fmt.Sprintf("payload bytes (at least %d: the stamp header)", HeaderSize))
	fs.IntVar(&cfg.Producers, "producers", 1, "publishing connections")
	fs.IntVar(&cfg.Consumers, "consumers", 1, "consuming connections, all on one durable pull consumer")
	fs.IntVar(&cfg.Window, "window", 1, "confirmed publishes in flight per producer")
	fs.BoolVar(&cfg.Confirmed, "confirmed", false, "JetStream publish and wait for the PubAck (default: core NATS publish, fire and forget)")
	fs.IntVar(&cfg.Prefetch, "prefetch", 256, "messages buffered per consumer (PullMaxMessages); MaxAckPending = prefetch × consumers")
	fs.BoolVar(&cfg.AutoAck, "auto-ack", false, "AckNone consumer (default: explicit ack of every delivery)")
	fs.DurationVar(&cfg.Duration, "duration", 10*time.Second, "measured duration (after the warmup)")
	fs.DurationVar(&cfg.Warmup, "warmup", 0, "unmeasured lead-in")
	fs.DurationVar(&cfg.Drain, "drain", 10*time.Second, "bound on the wait for outstanding confirms and deliveries at the end")
	fs.Float64Var(&cfg.Rate, "rate", 0, "total offered msgs/s, paced open loop (0 = as fast as the window allows)")
	fs.Int64Var(&cfg.MaxAhead, "max-ahead", 0, "producers wait while sent − delivered ≥ N (0 = no bound)")
	fs.StringVar(&cfg.Mode, "mode", ModeThroughput, "throughput, or rtt (one message at a time)")
	fs.BoolVar(&cfg.KeepStream, "keep-stream", false, "leave the stream on the server at the end (default: delete it)")
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
	if cfg.Stream == "" {
		cfg.Stream = fmt.Sprintf("JSBENCH_%d", ns)
	}
	if cfg.Subject == "" {
		cfg.Subject = fmt.Sprintf("jsbench.%d", ns)
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
	res, err := Run(ctx, cfg)
	if res != nil {
		if *asJSON {
			if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
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
