// Package crashdemo is the recorded crash demo: three fibril brokers laid
// out as in contrib/swarm/compose.yaml (one public, two private, embedded
// raft), a client that knows only the public broker's address and
// publishes with confirms and consumes all the time, and two crashes — the
// private owner of the client's partitions is killed (SIGKILL) and later
// restarted, then the public broker itself is killed and restarted. It
// writes a transcript with one line per second, the timings, a ledger's
// totals (confirmed, delivered, lost, duplicates) and a chart of the
// throughput with the crashes marked.
//
// Run is the whole demo; cmd/crashdemo is its command line and
// integration/crashdemo_test.go runs a short version of it. docs/demo
// holds a recorded run.
package crashdemo

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"time"

	"github.com/fibrilgo/fibril/core/testkit"
)

// Config is one run of the demo. Zero fields take the defaults of the
// recorded run (docs/demo/crash-demo).
type Config struct {
	// FibrilBin is the broker binary to run (required).
	FibrilBin string
	// OutDir receives transcript.txt, summary.json, summary.md,
	// throughput.csv and chart.svg (required; created if missing).
	OutDir string
	// WorkDir holds the brokers' data directories and logs. Empty: a new
	// temporary directory, removed when Run returns.
	WorkDir string

	// The phases. Steady: traffic before the first crash. PrivateDown: how
	// long the private owner stays dead. Settle: traffic after it is back
	// (ready) and before the public broker is killed. PublicDown: how long
	// the public broker stays dead. After: traffic once it is ready again.
	// Drain: the longest wait, once publishing stops, for every confirmed
	// message to be delivered.
	Steady, PrivateDown, Settle, PublicDown, After, Drain time.Duration

	// Rate is the confirmed publishes the client starts per second; Window
	// bounds those waiting for their confirm (a due publish is skipped, not
	// queued, while the window is full, so the rate never bursts above
	// Rate). PublishTimeout bounds one publish, its re-sends included.
	Rate, Window   int
	PublishTimeout time.Duration
	// PayloadBytes is the size of each message.
	PayloadBytes int
	// Partitions of the demo's queue.
	Partitions int

	// HeartbeatMS and LivenessTTLMS are the brokers'
	// coordination.heartbeat_interval_ms and coordination.liveness_ttl_ms.
	HeartbeatMS, LivenessTTLMS int

	// CrashWindow bounds the duplicates the demo accepts: a message may be
	// delivered again only if its previous delivery came at most
	// CrashWindow before a crash (or between the crash and the first fresh
	// delivery after it, plus CrashWindow): its ack may have died with the
	// crash (an ACK is fire-and-forget). Any other duplicate is counted as
	// unexplained.
	CrashWindow time.Duration

	// Out, when set, also receives every transcript line as it is written.
	Out io.Writer
	// FreePort hands out a loopback port for a broker's listener (nil: a
	// port below the kernel's ephemeral range that nothing listens on).
	FreePort func() (int, error)

	username, password string
}

func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.Steady, 10*time.Second)
	def(&c.PrivateDown, 10*time.Second)
	def(&c.Settle, 10*time.Second)
	def(&c.PublicDown, 3*time.Second)
	def(&c.After, 12*time.Second)
	def(&c.Drain, 30*time.Second)
	def(&c.PublishTimeout, 3*time.Second)
	def(&c.CrashWindow, 10*time.Second)
	if c.Rate <= 0 {
		c.Rate = 1000
	}
	if c.Window <= 0 {
		c.Window = 500
	}
	if c.PayloadBytes < 32 {
		c.PayloadBytes = 128
	}
	if c.Partitions <= 0 {
		c.Partitions = 12
	}
	if c.HeartbeatMS <= 0 {
		c.HeartbeatMS = 250
	}
	if c.LivenessTTLMS <= 0 {
		c.LivenessTTLMS = 1500
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	if c.FreePort == nil {
		c.FreePort = testkit.PickPort
	}
	c.username, c.password = "app", "crash-demo-"+randomHex(16)
	return c
}

// lifetime bounds every loop of a run: the phases, the drain and ten
// minutes for starting and restarting brokers.
func (c Config) lifetime() time.Duration {
	return c.Steady + c.PrivateDown + c.Settle + c.PublicDown + c.After + c.Drain + c.PublishTimeout + 10*time.Minute
}

func (c Config) validate() error {
	switch {
	case c.FibrilBin == "":
		return errors.New("crashdemo: Config.FibrilBin is required")
	case c.OutDir == "":
		return errors.New("crashdemo: Config.OutDir is required")
	case c.Rate > 20000:
		return errors.New("crashdemo: Config.Rate above 20000/s")
	case c.Partitions > 64:
		return errors.New("crashdemo: Config.Partitions above 64")
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
