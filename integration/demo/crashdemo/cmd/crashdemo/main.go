// Command crashdemo runs the crash demo (package crashdemo): three brokers
// as in contrib/swarm/compose.yaml, a client of the public broker only,
// the private owner of its partitions killed and restarted, then the
// public broker killed and restarted; it prints one line per second and
// writes transcript.txt, summary.json, summary.md, throughput.csv and
// chart.svg into --out. integration/demo/crash-demo.sh builds the broker
// and runs it with the settings of the recording in docs/demo/crash-demo.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/fibrilgo/fibril/integration/demo/crashdemo"
)

func main() {
	var cfg crashdemo.Config
	flag.StringVar(&cfg.FibrilBin, "fibril", "", "the fibril broker binary (required; go build -o DIR/fibril ./cmd/fibril)")
	flag.StringVar(&cfg.OutDir, "out", "crash-demo", "directory for transcript.txt, summary.json, summary.md, throughput.csv and chart.svg")
	flag.StringVar(&cfg.WorkDir, "work", "", "directory for the brokers' data and logs (default: a temporary directory, removed at the end)")
	flag.DurationVar(&cfg.Steady, "steady", 0, "traffic before the private owner is killed (default 10s)")
	flag.DurationVar(&cfg.PrivateDown, "private-down", 0, "how long the private owner stays down (default 10s)")
	flag.DurationVar(&cfg.Settle, "settle", 0, "traffic after the private owner is back, before the public broker is killed (default 10s)")
	flag.DurationVar(&cfg.PublicDown, "public-down", 0, "how long the public broker stays down (default 3s)")
	flag.DurationVar(&cfg.After, "after", 0, "traffic after the public broker is back (default 12s)")
	flag.DurationVar(&cfg.Drain, "drain", 0, "longest wait for the last confirmed messages once publishing stops (default 30s)")
	flag.IntVar(&cfg.Rate, "rate", 0, "confirmed publishes started per second (default 1000)")
	flag.IntVar(&cfg.Window, "window", 0, "publishes waiting for their confirm at most (default 500)")
	flag.IntVar(&cfg.PayloadBytes, "size", 0, "payload bytes (default 128)")
	flag.IntVar(&cfg.Partitions, "partitions", 0, "partitions of the demo's queue (default 12)")
	flag.Parse()
	if cfg.FibrilBin == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	cfg.Out = os.Stdout
	// Ctrl-C ends the demo cleanly: Run stops every broker it started.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sum, err := crashdemo.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "crashdemo:", err)
		os.Exit(1)
	}
	if sum.Totals.Lost > 0 || sum.Totals.DialsPrivate > 0 {
		fmt.Fprintf(os.Stderr, "crashdemo: %d confirmed messages lost, %d dials to a private broker\n", sum.Totals.Lost, sum.Totals.DialsPrivate)
		os.Exit(1)
	}
	fmt.Printf("outputs in %s\n", cfg.OutDir)
}
