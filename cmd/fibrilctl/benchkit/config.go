package benchkit

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"time"
)

// Modes.
const (
	ModeThroughput = "throughput"
	ModeRTT        = "rtt"
)

// DefaultPrefetch is the prefetch Validate sets when none is given.
const DefaultPrefetch = 256

// Config describes a run, whatever the system. A driver's own settings
// (addresses, topic or stream) are kept by the driver.
type Config struct {
	Size      int // payload bytes, ≥ HeaderSize
	Producers int
	Consumers int
	Window    int // confirmed publishes in flight per producer
	Confirmed bool
	Prefetch  int
	AutoAck   bool
	Duration  time.Duration // measured part
	Warmup    time.Duration // before it, not measured
	Drain     time.Duration // bound on the wait for outstanding confirms and deliveries
	Rate      float64       // total offered msgs/s; 0 = unpaced (closed loop)
	MaxAhead  int64         // sent − delivered bound; 0 = none
	Mode      string
	// FanOut: every consumer receives every message (a stream, or one
	// subscription of its own per consumer), so each is checked for loss
	// and duplicates on its own and the delivered rate is the total over
	// the consumers.
	FanOut bool
	// ServerPID is the server under test, when it runs on this machine:
	// its CPU time over the measured window is reported (0 = not read).
	ServerPID int

	// Progress receives one line per second while running (nil = none).
	Progress io.Writer
	// Log receives warnings (nil = Progress, else discarded).
	Log io.Writer
}

// Validate fills defaults and checks the configuration. --mode rtt forces
// one confirmed producer with a window of 1, one consumer, no pacing and
// no --max-ahead.
func (c *Config) Validate() error {
	if c.Mode == "" {
		c.Mode = ModeThroughput
	}
	if c.Mode != ModeThroughput && c.Mode != ModeRTT {
		return fmt.Errorf("--mode must be throughput or rtt, not %q", c.Mode)
	}
	if c.FanOut && c.MaxAhead > 0 {
		return errors.New("--max-ahead does not apply when every consumer receives every message")
	}
	if c.Size < HeaderSize {
		return fmt.Errorf("--size must be at least %d bytes (the bench header)", HeaderSize)
	}
	if c.Window <= 0 {
		c.Window = 1
	}
	if c.Prefetch <= 0 {
		c.Prefetch = DefaultPrefetch
	}
	if c.Producers < 0 || c.Consumers < 0 {
		return errors.New("--producers and --consumers cannot be negative")
	}
	if c.Duration <= 0 {
		return errors.New("--duration must be positive")
	}
	if c.Warmup < 0 || c.Drain < 0 || c.Rate < 0 || c.MaxAhead < 0 || c.ServerPID < 0 {
		return errors.New("--warmup, --drain, --rate, --max-ahead and --server-pid cannot be negative")
	}
	if c.Drain == 0 {
		c.Drain = 10 * time.Second
	}
	if c.Mode == ModeRTT {
		c.Producers, c.Consumers, c.Window, c.Confirmed = 1, 1, 1, true
		c.Rate, c.MaxAhead = 0, 0
	}
	if c.Producers == 0 && c.Consumers == 0 {
		return errors.New("nothing to do: no producers and no consumers")
	}
	if c.Log == nil {
		c.Log = c.Progress
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	return nil
}

// AddFlags registers the flags of the fields of c on fs, with the same
// names and defaults in every tool. help replaces the usage text of the
// flags it names (where the wording depends on the system).
func (c *Config) AddFlags(fs *flag.FlagSet, help map[string]string) {
	usage := func(name, def string) string {
		if h, ok := help[name]; ok {
			return h
		}
		return def
	}
	fs.IntVar(&c.Size, "size", 1024, usage("size", fmt.Sprintf("payload bytes (at least %d: the stamp header)", HeaderSize)))
	fs.IntVar(&c.Producers, "producers", 1, usage("producers", "publishing connections"))
	fs.IntVar(&c.Consumers, "consumers", 1, usage("consumers", "consuming connections"))
	fs.IntVar(&c.Window, "window", 1, usage("window", "confirmed publishes in flight per producer"))
	fs.BoolVar(&c.Confirmed, "confirmed", false, usage("confirmed", "wait for the confirm of every publish (default: fire and forget)"))
	fs.IntVar(&c.Prefetch, "prefetch", DefaultPrefetch, usage("prefetch", "deliveries buffered per consumer"))
	fs.BoolVar(&c.AutoAck, "auto-ack", false, usage("auto-ack", "no acks (default: ack every delivery)"))
	fs.DurationVar(&c.Duration, "duration", 10*time.Second, usage("duration", "measured duration (after the warmup)"))
	fs.DurationVar(&c.Warmup, "warmup", 0, usage("warmup", "unmeasured lead-in"))
	fs.DurationVar(&c.Drain, "drain", 10*time.Second, usage("drain", "bound on the wait for outstanding confirms and deliveries at the end"))
	fs.Float64Var(&c.Rate, "rate", 0, usage("rate", "total offered msgs/s, paced open loop (0 = as fast as the window allows)"))
	fs.Int64Var(&c.MaxAhead, "max-ahead", 0, usage("max-ahead", "producers wait while sent − delivered ≥ N (0 = no bound)"))
	fs.StringVar(&c.Mode, "mode", ModeThroughput, usage("mode", "throughput, or rtt (one message at a time)"))
	if _, ok := help["fan-out"]; ok { // only for systems that can
		fs.BoolVar(&c.FanOut, "fan-out", false, help["fan-out"])
	}
	fs.IntVar(&c.ServerPID, "server-pid", 0, usage("server-pid", "PID of the server, when it runs on this machine: report its CPU time over the measured window (Linux /proc)"))
}
