package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/integration/demo/crashdemo"
)

// The crash demo (integration/demo/crashdemo, recorded in
// docs/demo/crash-demo), short: one public and two private brokers, a
// client given only the public broker's address publishing with confirms
// and consuming; the private owner of its partitions is killed (kill -9)
// and restarted, then the public broker is killed and restarted. Every
// confirmed message is delivered (S-136, S-141); the partitions move to
// their in-sync follower; confirms and deliveries resume after each crash;
// the client never dials a private broker; duplicates are only
// redeliveries of messages delivered around a crash, whose ACK — fire and
// forget — may have died with it (S-54, S-57, docs/cluster.md#replication).
func TestCrashDemo(t *testing.T) {
	out, work := t.TempDir(), t.TempDir()
	tx := &lockedBuffer{}
	dumpOnFailure(t, "crash demo transcript", tx)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		logs, _ := filepath.Glob(filepath.Join(work, "*", "broker.log"))
		for _, l := range append(logs, filepath.Join(work, "client.log")) {
			if b, err := os.ReadFile(l); err == nil {
				t.Logf("---- %s ----\n%s", l, tail(string(b), 150))
			}
		}
	})
	cfg := crashdemo.Config{
		FibrilBin:   fibrilBin,
		OutDir:      out,
		WorkDir:     work,
		Steady:      3 * time.Second,
		PrivateDown: 5 * time.Second,
		Settle:      3 * time.Second,
		PublicDown:  2 * time.Second,
		After:       4 * time.Second,
		Drain:       30 * time.Second,
		Rate:        500,
		Out:         tx,
		FreePort:    func() (int, error) { return freePort(t), nil },
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	sum, err := crashdemo.Run(ctx, cfg)
	if err != nil {
		t.Fatalf("the demo did not run to its end: %v", err)
	}
	t.Logf("demo ran %v", time.Since(start).Round(time.Second))
	tot := sum.Totals
	t.Logf("confirmed %d, delivered %d, lost %d, duplicates %d (%d unexplained), publish errors %v, dials public/private/other %d/%d/%d",
		tot.Confirmed, tot.Delivered, tot.Lost, tot.Duplicates, tot.UnexplainedDuplicates, tot.ErrorsByCode, tot.DialsPublic, tot.DialsPrivate, tot.DialsOther)

	if tot.Lost != 0 {
		t.Errorf("%d confirmed messages were never delivered", tot.Lost)
	}
	// At least 4 s worth of the 17 s of traffic.
	if least := 4 * cfg.Rate; tot.Confirmed < least {
		t.Errorf("only %d publishes confirmed, want at least %d", tot.Confirmed, least)
	}
	if tot.UnexplainedDuplicates != 0 {
		t.Errorf("%d of %d duplicates were not delivered first around a crash: a settled message came back", tot.UnexplainedDuplicates, tot.Duplicates)
	}
	if tot.DialsPrivate != 0 || tot.DialsOther != 0 || tot.DialsPublic == 0 {
		t.Errorf("client dials: public %d, private %d, other %d; want only the public broker's address", tot.DialsPublic, tot.DialsPrivate, tot.DialsOther)
	}
	if tot.PrefetchViolations+tot.ProtocolViolations+tot.UncorrelatedErrors+tot.UnknownSubDeliveries != 0 || tot.UnknownDeliveries != 0 {
		t.Errorf("broker misbehaviour seen by the client: %+v", tot)
	}
	if len(sum.Timings) != 2 {
		t.Fatalf("timings of %d crashes, want 2: %+v", len(sum.Timings), sum.Timings)
	}
	for _, tm := range sum.Timings {
		if tm.FirstConfirm == nil || tm.FirstDelivery == nil {
			t.Errorf("%s: no confirm or no delivery of a message published after it (%+v)", tm.Crash, tm)
		}
	}
	if p := sum.Timings[0]; p.Node != sum.PrivateOwner || p.OwnerAfter != sum.Follower {
		t.Errorf("the private owner %s was killed and its partitions went to %q, want its follower %s", sum.PrivateOwner, p.OwnerAfter, sum.Follower)
	}
	if p := sum.Timings[1]; p.FirstConfirmAfterRestart == nil {
		t.Errorf("no confirm after the public broker's restart")
	}

	for _, name := range []string{"transcript.txt", "summary.json", "summary.md", "throughput.csv", "chart.svg"} {
		b, err := os.ReadFile(filepath.Join(out, name))
		if err != nil || len(b) == 0 {
			t.Errorf("output %s: %d bytes, %v", name, len(b), err)
		}
	}
	svg, _ := os.ReadFile(filepath.Join(out, "chart.svg"))
	for _, want := range []string{"<svg", "private owner killed", "public broker killed", "public broker restarted", "<polyline"} {
		if !strings.Contains(string(svg), want) {
			t.Errorf("chart.svg lacks %q", want)
		}
	}
	transcript, _ := os.ReadFile(filepath.Join(out, "transcript.txt"))
	if !strings.Contains(string(transcript), "confirmed") || !strings.Contains(string(transcript), "totals: ") {
		t.Errorf("transcript.txt lacks the per-second lines or the totals")
	}
}
