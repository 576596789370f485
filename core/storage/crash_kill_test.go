package storage_test

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/storage"
)

// The process-crash test. The parent re-executes this test binary as a
// child (TestCrashChild, selected by crashDirEnv) that appends under
// FsyncAlways from several goroutines, settles acknowledged offsets and
// writes engine state, printing one line per acknowledged operation:
//
//	A <offset> <crc32 of the data>   Append returned
//	S <offset>                       Settle returned
//	E <n>                            AppendState(n) returned
//
// The parent SIGKILLs the child at a random moment, reads every line the
// child managed to print, reopens the partition in the same directory and
// checks: every acknowledged append is present with the same checksum (or
// was trimmed after being settled), offsets are dense, every acknowledged
// settlement is in force, engine state covers every acknowledged entry.
// The next iteration's child continues in the same directory.

const crashDirEnv = "FIBRIL_STORAGE_CRASH_CHILD_DIR"

// crashWALEnv set: the child commits through a write-ahead log in the
// partition directory's parent (64 KiB files, a ring of 2, so it turns and
// checkpoints during a run), and the parent recovers it before it checks.
const crashWALEnv = "FIBRIL_STORAGE_CRASH_WAL"

// openCrashWAL opens the WAL for a partition in dir when the run uses one.
func openCrashWAL(useWAL bool, dir string) (*storage.WAL, error) {
	if !useWAL {
		return nil, nil
	}
	w, err := storage.OpenWAL(filepath.Dir(dir), storage.WALOptions{Logger: quietLogger(), FileBytes: 64 << 10, Files: 2})
	if err == nil {
		storage.SetWALAlways(w) // one partition: else it would rarely use it
	}
	return w, err
}

func childOptions() storage.Options {
	return storage.Options{SegmentMaxBytes: 16 << 10, IndexEveryBytes: 1024}
}

func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("only runs as the child of TestCrashKill")
	}
	o := childOptions()
	o.Logger = quietLogger()
	w, err := openCrashWAL(os.Getenv(crashWALEnv) != "", dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open WAL:", err)
		os.Exit(3)
	}
	o.WAL = w
	p, err := storage.OpenPartition(dir, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		os.Exit(3)
	}
	var last uint64
	p.ReplayState(func(e []byte) error {
		last, _ = binary.Uvarint(e[1:])
		return nil
	})
	var outMu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	line := func(format string, args ...any) { // line-buffered
		outMu.Lock()
		fmt.Fprintf(out, format+"\n", args...)
		out.Flush()
		outMu.Unlock()
	}
	acked := make(chan uint64, 1024)
	for g := 0; g < 4; g++ {
		go func() {
			r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(g)))
			for {
				d := idData(r.Uint64())
				off, err := p.Append(d, time.Now().UnixMilli())
				if err != nil {
					fmt.Fprintln(os.Stderr, "child append:", err)
					os.Exit(4)
				}
				line("A %d %d", off, checksum(d))
				select {
				case acked <- off:
				default:
				}
			}
		}()
	}
	go func() {
		var batch []uint64
		for off := range acked {
			if rand.IntN(5) == 0 {
				continue // leave some unsettled
			}
			if batch = append(batch, off); len(batch) < 4 {
				continue
			}
			if err := p.Settle(batch...); err != nil {
				fmt.Fprintln(os.Stderr, "child settle:", err)
				os.Exit(5)
			}
			for _, o := range batch {
				line("S %d", o)
			}
			batch = batch[:0]
		}
	}()
	go func() {
		for i := 0; ; i++ {
			var err error
			if i%50 == 49 {
				err = p.CompactState(binary.AppendUvarint([]byte("S"), last))
			} else if err = p.AppendState(binary.AppendUvarint([]byte("E"), last+1)); err == nil {
				last++
				line("E %d", last)
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "child state:", err)
				os.Exit(6)
			}
			time.Sleep(time.Millisecond)
		}
	}()
	line("READY")
	time.Sleep(20 * time.Second) // the parent kills long before; never linger
	os.Exit(0)
}

func TestCrashKill(t *testing.T) { runCrashKill(t, false) }

// TestCrashKillWAL is TestCrashKill with the child committing through a
// write-ahead log (half the iterations).
func TestCrashKillWAL(t *testing.T) { runCrashKill(t, true) }

func runCrashKill(t *testing.T, useWAL bool) {
	if os.Getenv(crashDirEnv) != "" {
		t.Skip("child")
	}
	iters, budget := 100, 75*time.Second
	if testing.Short() {
		iters, budget = 15, 20*time.Second
	}
	if useWAL {
		iters, budget = iters/2, budget/2
	}
	dir := filepath.Join(t.TempDir(), "p")
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	acked := map[uint64]uint32{} // offset -> crc, cumulative over iterations
	settled := map[uint64]bool{}
	var maxState uint64
	deadline := time.Now().Add(budget)
	done := 0
	for ; done < iters && time.Now().Before(deadline); done++ {
		lines := runChild(t, dir, useWAL, rng)
		for _, l := range lines {
			f := strings.Fields(l)
			switch {
			case len(f) == 3 && f[0] == "A":
				off, _ := strconv.ParseUint(f[1], 10, 64)
				crc, _ := strconv.ParseUint(f[2], 10, 32)
				if prev, dup := acked[off]; dup && prev != uint32(crc) {
					t.Fatalf("offset %d acknowledged twice with different data", off)
				}
				acked[off] = uint32(crc)
			case len(f) == 2 && f[0] == "S":
				off, _ := strconv.ParseUint(f[1], 10, 64)
				settled[off] = true
			case len(f) == 2 && f[0] == "E":
				n, _ := strconv.ParseUint(f[1], 10, 64)
				maxState = max(maxState, n)
			}
		}
		verifyAfterKill(t, dir, useWAL, acked, settled, maxState)
		if t.Failed() {
			t.Fatalf("iteration %d failed", done)
		}
	}
	t.Logf("%d SIGKILL iterations; %d acknowledged appends, %d settlements, %d state entries verified", done, len(acked), len(settled), maxState)
	if done < iters && !testing.Short() {
		t.Logf("stopped at the %v time budget", budget)
	}
}

// runChild starts a child on dir, kills it at a random moment and returns
// every line it printed.
func runChild(t *testing.T, dir string, useWAL bool, rng *rand.Rand) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashDirEnv+"="+dir)
	if useWAL {
		cmd.Env = append(cmd.Env, crashWALEnv+"=1")
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 4096)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		io.Copy(io.Discard, stdout)
		close(lines)
	}()
	var got []string
	killAfterAcks := 1 + rng.IntN(400)
	killAt := time.Duration(rng.IntN(120)) * time.Millisecond
	iterDeadline := time.After(15 * time.Second)
	var timer <-chan time.Time
	acks := 0
	killed := false
	kill := func() {
		if !killed {
			cmd.Process.Signal(syscall.SIGKILL)
			killed = true
		}
	}
	for l := range lines {
		got = append(got, l)
		if l == "READY" {
			timer = time.After(killAt)
		}
		if strings.HasPrefix(l, "A ") {
			if acks++; acks >= killAfterAcks {
				kill()
			}
		}
		select {
		case <-timer:
			kill()
		case <-iterDeadline:
			kill()
			t.Errorf("child iteration took too long")
		default:
		}
		if killed {
			break
		}
	}
	kill()
	for l := range lines { // everything printed before the kill counts
		got = append(got, l)
	}
	err = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
		t.Fatalf("child was not killed (err %v): %s", err, stderr.String())
	}
	return got
}

func verifyAfterKill(t *testing.T, dir string, useWAL bool, acked map[uint64]uint32, settled map[uint64]bool, maxState uint64) {
	t.Helper()
	o := childOptions()
	o.Logger = quietLogger()
	w, err := openCrashWAL(useWAL, dir)
	if err != nil {
		t.Fatalf("recover the WAL after SIGKILL: %v", err)
	}
	o.WAL = w
	p, err := storage.OpenPartition(dir, o)
	if err != nil {
		t.Fatalf("reopen after SIGKILL: %v", err)
	}
	defer func() {
		p.Close()
		if w != nil {
			w.Close()
		}
	}()
	if err := p.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	first, next := p.Bounds()
	want := first
	present := map[uint64]uint32{}
	if err := p.Scan(first, func(r storage.Record) bool {
		if r.Offset != want {
			t.Errorf("scan: offset %d, want %d (gap or duplicate)", r.Offset, want)
			return false
		}
		if _, ok := parseID(r.Data); !ok {
			t.Errorf("offset %d holds data no appender wrote", r.Offset)
		}
		present[r.Offset] = checksum(r.Data)
		want++
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if want != next {
		t.Errorf("scan ended at %d, next %d", want, next)
	}
	for off, crc := range acked {
		switch {
		case off < first:
			if !settled[off] {
				t.Errorf("acknowledged offset %d trimmed but never settled", off)
			}
		case off >= next:
			t.Errorf("acknowledged offset %d lost (next %d)", off, next)
		case present[off] != crc:
			t.Errorf("acknowledged offset %d has different data", off)
		}
	}
	for off := range settled {
		if !p.IsSettled(off) {
			t.Errorf("acknowledged settlement of %d lost", off)
		}
	}
	var last uint64
	var seen bool
	if err := p.ReplayState(func(e []byte) error {
		v, _ := binary.Uvarint(e[1:])
		if e[0] == 'E' && seen && v != last+1 {
			return fmt.Errorf("state entry %d after %d", v, last)
		}
		last, seen = v, true
		return nil
	}); err != nil {
		t.Error(err)
	}
	if last < maxState {
		t.Errorf("state ends at %d, but %d was acknowledged", last, maxState)
	}
}
