package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime/pprof"
	"time"

	"github.com/fibrilgo/fibril/cmd/fibrilctl/benchkit"
	"github.com/fibrilgo/fibril/cmd/fibrilctl/internal/bench"
	"github.com/fibrilgo/fibril/core/client"
)

const benchArgs = `--topic T [--queues Q] [--partitions N] [--keys N] [--stream] [--size BYTES] [--producers P] [--consumers C] [--window W] [--confirmed]
       [--prefetch N] [--auto-ack] [--duration D] [--warmup D] [--drain D] [--rate R] [--max-ahead N]
       [--mode throughput|rtt|fsync] [--fsync-dir DIR] [--server-pid PID] [--json] [--progress=false]`

func runBench(ctx context.Context, g *globals, e *env, args []string) error {
	fs := newFlagSet("bench", benchArgs, g, e)
	var cfg benchkit.Config
	cfg.AddFlags(fs.FlagSet, map[string]string{
		"consumers": "consuming connections, each subscribed to every partition of its queues (all of them, with one queue)",
		"window":    "confirmed publishes in flight per producer (PublishAsync)",
		"confirmed": "wait for PUBLISH_OK (default: fire and forget)",
		"prefetch":  "unsettled deliveries per partition and consumer",
		"auto-ack":  "auto-ack subscriptions (default: ack every delivery)",
		"mode":      "throughput, rtt (one message at a time), fsync (local disk baseline) or idle (what --connections idle connections cost the broker at --admin)",
		"server-pid": "PID of the broker, when it runs on this machine: report its CPU time over the measured window, " +
			"and per message published (Linux /proc)",
	})
	var drv bench.Driver
	fs.StringVar(&drv.Topic, "topic", "", "queue to use (default: a fresh fibrilctl-bench-<time> topic, so no earlier backlog interferes)")
	fs.StringVar(&drv.Group, "group", "", "queue namespace inside the topic")
	fs.IntVar(&drv.Queues, "queues", 1, "queues to declare and spread messages over: <topic>-0 … <topic>-(Q-1) when Q > 1")
	fs.IntVar(&drv.Partitions, "partitions", 1, "partitions to declare each queue with and spread messages over")
	fs.IntVar(&drv.Keys, "keys", 0, "publish with one of N keys (k0 …) instead of naming partitions, and subscribe to all partitions, following the count (for runs across a repartition)")
	fs.BoolVar(&drv.Stream, "stream", false, "declare streams instead of queues: every consumer reads every record from the earliest (fan-out; delivered msgs/s is the total over the consumers)")
	coalesce := fs.Bool("coalesce", false, "deprecated, no effect: the client always batches its writes")
	fsyncDir := fs.String("fsync-dir", os.TempDir(), "--mode fsync: directory to write in (use the broker's data_dir file system)")
	asJSON := fs.Bool("json", false, "print exactly one JSON object on stdout")
	progress := fs.Bool("progress", true, "print progress to stderr once a second")
	idleConns := fs.Int("connections", 1000, "--mode idle: client connections to open and hold for --duration")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the bench process to `file` (to check it is not the bottleneck)")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	if *coalesce {
		fmt.Fprintln(e.stderr, "fibrilctl bench: --coalesce is deprecated and has no effect: core/client batches its writes")
	}

	if drv.Queues < 1 {
		return usagef("--queues must be at least 1")
	}

	if cfg.Mode == "fsync" {
		if cfg.Duration <= 0 {
			return usagef("--duration must be positive")
		}
		res, err := benchkit.Fsync(ctx, *fsyncDir, cfg.Size, cfg.Duration)
		if err != nil {
			return fmt.Errorf("fsync bench: %w", err)
		}
		if *asJSON {
			return json.NewEncoder(e.stdout).Encode(res)
		}
		fmt.Fprintf(e.stdout, "fsync of %d B appends in %s: %d syncs in %.2fs\n  p50 %.1f µs  p90 %.1f  p99 %.1f  p99.9 %.1f  max %.1f  mean %.1f\n  load %s; pressure (10 s) cpu %.0f%% io %.0f%%\n",
			res.Size, res.Dir, res.Syncs, res.DurationS, res.P50, res.P90, res.P99, res.P999, res.Max, res.Mean, res.LoadAvg, res.CPUPress, res.IOPress)
		return nil
	}

	if cfg.Mode == "idle" {
		opts, err := g.clientOptions(e)
		if err != nil {
			return err
		}
		return runIdle(ctx, g, e, opts, *idleConns, cfg.Duration, *asJSON)
	}

	if drv.Topic == "" {
		drv.Topic = fmt.Sprintf("fibrilctl-bench-%d", time.Now().UnixNano())
	}
	opts, err := g.clientOptions(e)
	if err != nil {
		return err
	}
	opts.OperationTimeout = max(g.timeout, 30*time.Second)
	drv.Client = opts
	cfg.Log = e.stderr
	cfg.FanOut = drv.Stream
	if *progress {
		cfg.Progress = e.stderr
	}
	if cfg.Prefetch <= 0 {
		cfg.Prefetch = client.DefaultPrefetch // what Subscribe uses for 0
	}
	if err := cfg.Validate(); err != nil {
		return &usageError{err.Error()}
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	res, runErr := benchkit.Run(ctx, cfg, &drv)
	if res != nil {
		if *asJSON {
			if err := json.NewEncoder(e.stdout).Encode(res); err != nil {
				return err
			}
		} else {
			res.WriteTable(e.stdout)
		}
	}
	if runErr != nil {
		return fmt.Errorf("bench: %w", runErr)
	}
	return nil
}
