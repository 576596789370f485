package storage_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/storage"
	"github.com/fibrilgo/fibril/core/storage/faultfs"
)

// The power-loss harness. Each seed runs a few epochs; in each, appenders
// (sync and async), a settler, an engine-state writer (with compactions)
// and a syncer run against a faultfs filesystem with tiny segments, so
// rolls and retention deletions happen constantly; at a random point the
// filesystem "loses power" (faultfs.Crash), the partition is reopened on
// what survived, and the invariants are checked:
//
//   - the partition opens (a torn tail is never corruption);
//   - the retained offsets are dense and every record is byte-for-byte one
//     that an appender wrote;
//   - every append confirmed before the crash is present and intact, or was
//     deleted by retention after being settled (queue mode);
//   - every settlement covered by a completed Sync or by a later journal
//     fsync (the journal's synced sequence passed the one Settle left), and
//     under FsyncAlways every settlement older than a generous multiple of
//     the journal fsync bound, is still in force; and no record is settled
//     that nobody settled (stale settlements of lost offsets must not
//     attach to new records);
//   - engine state: snapshot then a contiguous run of entries, covering
//     every entry covered by a completed Sync.
//
// Under FsyncAlways no confirmed append may be lost; the same harness under
// FsyncNone must observe losses (so the test can fail).

type harness struct {
	t      *testing.T
	rng    *rand.Rand
	policy storage.FsyncPolicy
	dir    string
	opts   storage.Options
	stream bool
	// WAL runs (TestPowerLossAlwaysWAL): the partition commits through a
	// write-ahead log under /data with tiny files, so the ring turns and
	// checkpoints run all the time; w is the current one.
	wal       bool
	walAlways bool // every commit through the WAL (else only when it pays: one partition here, so rarely)
	wopts     storage.WALOptions
	w         *storage.WAL

	mu          sync.Mutex
	confirmed   map[uint64]uint64   // offset -> id, append confirmed
	known       map[uint64]uint64   // offset -> id of every record known to exist
	assigned    []offID             // async appends (maybe unconfirmed), for early settles
	settleCalls map[uint64][]uint64 // offset -> ids that were settled at that offset
	settleLog   []offID             // settles in return order
	settleInfo  []settleInfo        // settleLog[i]'s journal sequence and return time
	durableSet  int                 // settleLog[:durableSet] is covered by a completed Sync
	stateSeq    uint64              // last engine entry appended (serialized by stateMu)
	durableSt   uint64              // entries <= durableSt are covered by a completed Sync
	stateMu     sync.Mutex

	nextID  atomic.Uint64
	ops     atomic.Int64
	crashed atomic.Bool

	// Tail epochs (FsyncAlways): see epoch.
	tailMark atomic.Int64 // unix ns; an appender counts Appends started after it
	tailDone atomic.Bool  // some appender completed three of them
}

type offID struct{ off, id uint64 }

// settleInfo: when a Settle returned, and the journal's write sequence
// then (its entry is at or below it).
type settleInfo struct {
	seq uint64
	at  time.Time
}

// settleAgeBound: under FsyncAlways a settlement that returned this long
// before the crash must have been fsynced — the journal fsync bound
// (storage.JournalSyncDelay) with a wide margin for a loaded machine and
// the race detector.
const settleAgeBound = 50 * storage.JournalSyncDelay

func newHarness(t *testing.T, seed uint64, policy storage.FsyncPolicy) *harness {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	h := &harness{
		t: t, rng: rng, policy: policy, dir: "/data/p0",
		confirmed: map[uint64]uint64{}, known: map[uint64]uint64{}, settleCalls: map[uint64][]uint64{},
		stream: rng.IntN(5) == 0,
	}
	h.opts = storage.Options{
		Fsync:           policy,
		FsyncInterval:   time.Millisecond,
		SegmentMaxBytes: int64(300 + rng.IntN(2500)),
		IndexEveryBytes: 64 + rng.IntN(400),
		Logger:          quietLogger(),
	}
	if h.stream {
		h.opts.Retention = storage.Retention{ByLimits: true, MaxRecords: uint64(50 + rng.IntN(200))}
	}
	h.nextID.Store(seed << 32)
	return h
}

// epoch runs the workload on p until ~target operations completed, then
// crashes fsys and returns the surviving filesystem plus the snapshot of
// what was promised before the crash.
//
// A tail epoch (FsyncAlways) checks the bound on unsynced settlements
// while the partition is busy: at the target the syncer and the state
// writer stop (so neither a Sync nor a compaction covers what follows),
// the settler makes a few more settlements and stops, and the appenders
// keep the committer busy with records; once one appender has completed
// three Appends that started storage.JournalSyncDelay after that, the
// committer has passed the journal's deadline and finished the commit
// that fsyncs it (commit.go), so every settlement must survive the crash.
// (Mutation check: with the deadline removed from commit.go this fails.)
func (h *harness) epoch(p *storage.Partition, fsys *faultfs.FS, target int64, tail bool) (*faultfs.FS, promised) {
	stop := make(chan struct{})
	noSync := make(chan struct{}) // stops the syncer and the state writer (compactions fsync)
	side := make(chan struct{})   // stops the settler
	var wg, wgSide, wgSync sync.WaitGroup
	h.tailMark.Store(0)
	h.tailDone.Store(false)
	fail := func(what string, err error) bool {
		if err == nil {
			return false
		}
		if !h.crashed.Load() {
			h.t.Errorf("%s before the crash: %v", what, err)
		}
		return true
	}
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	sideStopped := func() bool {
		select {
		case <-side:
			return true
		default:
			return stopped()
		}
	}
	syncStopped := func() bool {
		select {
		case <-noSync:
			return true
		default:
			return stopped()
		}
	}
	for a := 0; a < 3; a++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, 1))
			tailCount := 0
			for i := 0; (i < 400 || tail) && !stopped(); i++ {
				id := h.nextID.Add(1)
				d := idData(id)
				t0 := time.Now()
				if r.IntN(3) == 0 && !tail {
					// AppendAsync, or the deferred append followed by an
					// inline commit on this goroutine (CommitIfIdle).
					appendAsync, deferred := p.AppendAsync, r.IntN(2) == 0
					if deferred {
						appendAsync = p.AppendAsyncDeferred
					}
					off, err := appendAsync(d, 0, func(off uint64, err error) {
						if err == nil {
							h.mu.Lock()
							h.confirmed[off] = id
							h.known[off] = id
							h.mu.Unlock()
						}
					})
					if deferred && err == nil {
						p.CommitIfIdle()
					}
					if fail("AppendAsync", err) {
						return
					}
					h.mu.Lock()
					h.known[off] = id
					h.assigned = append(h.assigned, offID{off, id})
					h.mu.Unlock()
				} else {
					off, err := p.Append(d, 0)
					if fail("Append", err) {
						return
					}
					h.mu.Lock()
					h.confirmed[off] = id
					h.known[off] = id
					h.mu.Unlock()
					if m := h.tailMark.Load(); m != 0 && t0.UnixNano() > m {
						if tailCount++; tailCount >= 3 {
							h.tailDone.Store(true)
						}
					}
				}
				h.ops.Add(1)
			}
		}(h.rng.Uint64())
	}
	wg.Add(3)
	wgSide.Add(1)
	wgSync.Add(2)
	go func(seed uint64) { // settler: mostly confirmed offsets, sometimes not-yet-durable ones
		defer wg.Done()
		defer wgSide.Done()
		r := rand.New(rand.NewPCG(seed, 2))
		for i := 0; (i < 600 || tail) && !sideStopped(); i++ {
			h.mu.Lock()
			var pick []offID
			if r.IntN(2) == 0 { // in order from the frontier, so whole segments get settled
				f := p.SettledFrontier()
				for o := f; o < f+uint64(1+r.IntN(8)); o++ {
					if id, ok := h.known[o]; ok {
						pick = append(pick, offID{o, id})
					}
				}
			}
			for range 1 + r.IntN(4) {
				if n := len(h.assigned); n > 0 && r.IntN(3) == 0 {
					// The newest async appends: probably not durable yet.
					pick = append(pick, h.assigned[n-1-r.IntN(min(n, 4))])
				} else if len(h.settleLog)+len(h.confirmed) > 0 {
					for o, id := range h.confirmed { // map order is random enough
						if r.IntN(3) == 0 || len(pick) == 0 {
							pick = append(pick, offID{o, id})
							break
						}
					}
				}
			}
			h.mu.Unlock()
			if len(pick) == 0 {
				runtime.Gosched()
				continue
			}
			offs := make([]uint64, len(pick))
			for k, x := range pick {
				offs[k] = x.off
			}
			if fail("Settle", p.Settle(offs...)) {
				return
			}
			seq, _ := storage.JournalSeq(p)
			info := settleInfo{seq, time.Now()}
			h.mu.Lock()
			for _, x := range pick {
				h.settleCalls[x.off] = append(h.settleCalls[x.off], x.id)
				h.settleLog = append(h.settleLog, x)
				h.settleInfo = append(h.settleInfo, info)
			}
			h.mu.Unlock()
			for range r.IntN(20) {
				runtime.Gosched()
			}
		}
	}(h.rng.Uint64())
	compactEvery := 5 << h.rng.IntN(8)
	go func(seed uint64) { // engine state with compactions
		defer wg.Done()
		defer wgSync.Done()
		r := rand.New(rand.NewPCG(seed, 3))
		for i := 0; i < 300 && !syncStopped(); i++ {
			h.stateMu.Lock()
			var err error
			if r.IntN(compactEvery) == 0 {
				err = p.CompactState(binary.AppendUvarint([]byte("S"), h.stateSeq))
			} else {
				err = p.AppendState(binary.AppendUvarint([]byte("E"), h.stateSeq+1))
				if err == nil {
					h.stateSeq++
				}
			}
			h.stateMu.Unlock()
			if fail("state", err) {
				return
			}
			for range r.IntN(20) {
				runtime.Gosched()
			}
		}
	}(h.rng.Uint64())
	syncGap := 20 << h.rng.IntN(10) // some seeds sync rarely: long unsynced windows
	go func() {                     // syncer: everything returned before Sync started is durable after it
		defer wg.Done()
		defer wgSync.Done()
		for i := 0; i < 200 && !syncStopped(); i++ {
			h.mu.Lock()
			n := len(h.settleLog)
			h.mu.Unlock()
			h.stateMu.Lock()
			st := h.stateSeq
			h.stateMu.Unlock()
			if fail("Sync", p.Sync()) {
				return
			}
			h.mu.Lock()
			h.durableSet = max(h.durableSet, n)
			h.mu.Unlock()
			h.stateMu.Lock()
			h.durableSt = max(h.durableSt, st)
			h.stateMu.Unlock()
			for range syncGap {
				runtime.Gosched()
			}
		}
	}()

	deadline := time.Now().Add(2 * time.Second)
	for h.ops.Load() < target && time.Now().Before(deadline) {
		runtime.Gosched()
	}
	if tail {
		close(noSync)
		wgSync.Wait()
		// A few more settlements that no Sync covers.
		h.mu.Lock()
		n0 := len(h.settleLog)
		h.mu.Unlock()
		for limit := time.Now().Add(200 * time.Millisecond); time.Now().Before(limit); runtime.Gosched() {
			h.mu.Lock()
			n := len(h.settleLog)
			h.mu.Unlock()
			if n >= n0+3 {
				break
			}
		}
		close(side)
		wgSide.Wait()
		h.tailMark.Store(time.Now().Add(storage.JournalSyncDelay).UnixNano())
		for limit := time.Now().Add(10 * time.Second); !h.tailDone.Load(); runtime.Gosched() {
			if time.Now().After(limit) {
				h.t.Fatalf("tail epoch: the appenders made no progress")
			}
		}
	}
	// Snapshot the promises first: everything in it was durable before the
	// crash instant below.
	_, jsynced := storage.JournalSeq(p)
	now := time.Now()
	h.mu.Lock()
	pr := promised{confirmed: make(map[uint64]uint64, len(h.confirmed)), settles: slices.Clone(h.settleLog[:h.durableSet])}
	for o, id := range h.confirmed {
		pr.confirmed[o] = id
	}
	for i := h.durableSet; i < len(h.settleLog); i++ {
		in := h.settleInfo[i]
		switch {
		case tail || h.policy == storage.FsyncAlways && now.Sub(in.at) > settleAgeBound:
			pr.settles = append(pr.settles, h.settleLog[i])
			stats.settlesByAge.Add(1)
		case in.seq <= jsynced: // a journal fsync after it completed
			pr.settles = append(pr.settles, h.settleLog[i])
			stats.settlesBySync.Add(1)
		}
	}
	h.mu.Unlock()
	h.stateMu.Lock()
	pr.state = h.durableSt
	h.stateMu.Unlock()
	h.crashed.Store(true)
	after := fsys.Crash(h.rng)
	close(stop)
	wg.Wait()
	p.Close() // fails on the dead filesystem; that is fine
	if h.w != nil {
		h.w.Close()
	}
	return after, pr
}

// openWAL opens the WAL on fsys (recovering it) when the harness uses one,
// and returns the partition options to use with it.
func (h *harness) openWAL(fsys *faultfs.FS) storage.Options {
	o := h.opts
	o.FS = fsys
	if h.wal {
		wo := h.wopts
		wo.FS, wo.Logger = fsys, quietLogger()
		w, err := storage.OpenWAL("/data", wo)
		if err != nil {
			h.t.Fatalf("open WAL after power loss: %v", err)
		}
		if h.walAlways {
			storage.SetWALAlways(w)
		}
		h.w, o.WAL = w, w
	}
	return o
}

var stats struct {
	checked, records, trimmed, settlesChecked atomic.Int64
	settlesBySync, settlesByAge               atomic.Int64 // checked although no Sync covered them
	tailEpochs                                atomic.Int64
}

type promised struct {
	confirmed map[uint64]uint64
	settles   []offID
	state     uint64
}

// check reopens and verifies the invariants; it returns the partition and
// the number of confirmed appends that were lost.
func (h *harness) check(fsys *faultfs.FS, pr promised) (*storage.Partition, int) {
	t := h.t
	o := h.openWAL(fsys)
	p, err := storage.OpenPartition(h.dir, o)
	if err != nil {
		t.Fatalf("reopen after power loss: %v", err)
	}
	// Open starts a retention pass in the background; finish it so the
	// bounds hold still while we look.
	if err := p.EnforceRetention(); err != nil {
		t.Fatalf("retention after reopen: %v", err)
	}
	first, next := p.Bounds()
	got := map[uint64]uint64{}
	want := first
	if err := p.Scan(0, func(r storage.Record) bool {
		id, ok := parseID(r.Data)
		if r.Offset != want || !ok {
			t.Errorf("scan: offset %d (want %d), payload valid=%v", r.Offset, want, ok)
			return false
		}
		got[r.Offset] = id
		want++
		return true
	}); err != nil {
		t.Fatalf("scan: %v", err)
	}
	if want != next {
		t.Fatalf("scan stopped at %d, next is %d", want, next)
	}
	stats.checked.Add(int64(len(pr.confirmed)))
	stats.records.Add(int64(next - first))
	if first > 0 {
		stats.trimmed.Add(1)
	}
	lost := 0
	for off, id := range pr.confirmed {
		if off < first {
			if !h.stream && (!slices.Contains(h.settleCalls[off], id) || !storage.InJournal(p, off)) {
				t.Errorf("confirmed offset %d trimmed although its settlement is not on disk", off)
			}
			continue
		}
		if got[off] != id {
			lost++
		}
	}
	stats.settlesChecked.Add(int64(len(pr.settles)))
	for _, s := range pr.settles {
		if s.off >= first && got[s.off] == s.id && !p.IsSettled(s.off) {
			t.Errorf("settlement of %d was fsynced (Sync, journal fsync or age) but is gone", s.off)
		}
	}
	for off := first; off < next; off++ {
		if p.IsSettled(off) && !slices.Contains(h.settleCalls[off], got[off]) {
			t.Errorf("offset %d (id %x) is settled but nobody settled it (settled ids %x, first %d next %d)", off, got[off], h.settleCalls[off], first, next)
		}
	}
	// Engine state: optional snapshot S, then S+1, S+2, ... covering pr.state.
	var last uint64
	var seen, snap bool
	err = p.ReplayState(func(e []byte) error {
		v, n := binary.Uvarint(e[1:])
		if n <= 0 {
			return fmt.Errorf("bad entry %q", e)
		}
		switch {
		case e[0] == 'S' && !seen:
			snap = true
		case e[0] == 'E' && v == last+1:
		default:
			return fmt.Errorf("entry %c%d after %d (snapshot %v)", e[0], v, last, snap)
		}
		last, seen = v, true
		return nil
	})
	if err != nil {
		t.Errorf("replay: %v", err)
	}
	if last < pr.state {
		t.Errorf("engine state ends at %d, but %d was synced", last, pr.state)
	}
	h.stateMu.Lock()
	h.stateSeq = last
	h.durableSt = 0
	h.stateMu.Unlock()
	// The next epoch's promises start afresh (recorded ids stay for the
	// settlement checks above).
	h.mu.Lock()
	h.confirmed, h.assigned, h.settleLog, h.settleInfo, h.durableSet = map[uint64]uint64{}, nil, nil, nil, 0
	h.known = got
	for off, id := range got {
		if off >= first && pr.confirmed[off] == id {
			h.confirmed[off] = id // still confirmed: checked again after the next crash
		}
	}
	h.mu.Unlock()
	h.ops.Store(0)
	h.crashed.Store(false)
	return p, lost
}

func runPowerLoss(t *testing.T, seed uint64, policy storage.FsyncPolicy, epochs int) (lost int) {
	return runPowerLossWith(t, newHarness(t, seed, policy), epochs)
}

func runPowerLossWith(t *testing.T, h *harness, epochs int) (lost int) {
	policy := h.policy
	fsys := faultfs.New()
	o := h.openWAL(fsys)
	p, err := storage.OpenPartition(h.dir, o)
	if err != nil {
		t.Fatal(err)
	}
	for e := 0; e < epochs && !t.Failed(); e++ {
		var pr promised
		if h.rng.IntN(3) == 0 {
			fsys.SetSyncDelay(time.Duration(h.rng.IntN(80)) * time.Microsecond)
		}
		tail := policy == storage.FsyncAlways && h.rng.IntN(6) == 0
		fsys, pr = h.epoch(p, fsys, int64(1+h.rng.IntN(400)), tail)
		if tail {
			stats.tailEpochs.Add(1)
		}
		var l int
		p, l = h.check(fsys, pr)
		lost += l
	}
	p.Close()
	if h.w != nil {
		h.w.Close()
	}
	return lost
}

func seeds(t *testing.T) int {
	if testing.Short() {
		return 60
	}
	return 300
}

func TestPowerLossAlways(t *testing.T) {
	deadline := time.Now().Add(40 * time.Second)
	n := seeds(t)
	s := 0
	for ; s < n && time.Now().Before(deadline); s++ {
		if lost := runPowerLoss(t, uint64(s), storage.FsyncAlways, 3); lost > 0 {
			t.Errorf("seed %d: %d confirmed appends lost under fsync=always", s, lost)
		}
		if t.Failed() {
			t.Fatalf("seed %d failed", s)
		}
	}
	t.Logf("%d seeds: checked %d confirmed appends and %d fsynced settlements (%d of them covered by a journal fsync but no Sync, %d only by age: tail epochs or older than %v); %d tail epochs; %d records recovered; %d epochs had trimmed the head",
		s, stats.checked.Load(), stats.settlesChecked.Load(), stats.settlesBySync.Load(), stats.settlesByAge.Load(), settleAgeBound,
		stats.tailEpochs.Load(), stats.records.Load(), stats.trimmed.Load())
}

// TestPowerLossAlwaysWAL runs the harness with the partition committing
// through a write-ahead log whose files are a few KiB, so the ring turns
// and checkpoints (segment fsync, durable slot, file freed) run all the
// time, and recovery writes back what the segments lost: no confirmed
// append may be lost, and every other invariant holds.
func TestPowerLossAlwaysWAL(t *testing.T) {
	defer storage.SetMinWALFileBytes(4 << 10)()
	deadline := time.Now().Add(40 * time.Second)
	n := seeds(t)
	s := 0
	for ; s < n && time.Now().Before(deadline); s++ {
		h := newHarness(t, uint64(s), storage.FsyncAlways)
		h.wal, h.walAlways = true, h.rng.IntN(4) != 0
		h.wopts = storage.WALOptions{FileBytes: int64(4<<10 + h.rng.IntN(28<<10)), Files: 2 + h.rng.IntN(3)}
		if lost := runPowerLossWith(t, h, 3); lost > 0 {
			t.Errorf("seed %d: %d confirmed appends lost under fsync=always with a WAL", s, lost)
		}
		if t.Failed() {
			t.Fatalf("seed %d failed", s)
		}
	}
	t.Logf("%d seeds", s)
}

// TestPowerLossNoneLoses runs the same harness without fsync and asserts
// that it does lose confirmed appends: proof that the harness can tell.
func TestPowerLossNoneLoses(t *testing.T) {
	if lostSeeds := powerLossLosses(t, storage.FsyncNone); lostSeeds == 0 {
		t.Fatal("fsync=none never lost a confirmed append: the power-loss model is not biting")
	}
}

// TestPowerLossInterval runs the harness under FsyncInterval (1ms): the
// interval fsync now comes from a one-shot timer armed by writes, which
// must keep every invariant (dense intact prefix, settlements, state) when
// power fails at any point. Confirmed appends of the last interval may be
// lost, so losses are only reported.
func TestPowerLossInterval(t *testing.T) {
	powerLossLosses(t, storage.FsyncInterval)
}

// powerLossLosses runs the harness under a policy that may lose the newest
// confirmed appends (half the seeds, at most 20 s), logs the losses and
// returns how many seeds lost any. Every other invariant must hold.
func powerLossLosses(t *testing.T, policy storage.FsyncPolicy) int {
	deadline := time.Now().Add(20 * time.Second)
	lostSeeds, total, ran := 0, 0, 0
	for s := 0; s < seeds(t)/2 && time.Now().Before(deadline); s++ {
		lost := runPowerLoss(t, uint64(s), policy, 2)
		ran++
		total += lost
		if lost > 0 {
			lostSeeds++
		}
		if t.Failed() {
			t.Fatalf("seed %d failed", s)
		}
	}
	t.Logf("fsync=%s: %d of %d seeds lost %d confirmed appends in total", policy, lostSeeds, ran, total)
	return lostSeeds
}

// TestFsyncFailureIsFailStop injects an fsync error: every waiting append
// gets it, later work gets ErrFailed, and a reopen finds every append that
// was confirmed before the failure.
func TestFsyncFailureIsFailStop(t *testing.T) {
	fsys := faultfs.New()
	o := storage.Options{FS: fsys, Logger: quietLogger(), SegmentMaxBytes: 4096}
	p, err := storage.OpenPartition("/d", o)
	if err != nil {
		t.Fatal(err)
	}
	var good []uint64
	for i := 0; i < 20; i++ {
		off, err := p.Append(idData(uint64(i)), 0)
		if err != nil {
			t.Fatal(err)
		}
		good = append(good, off)
	}
	fsys.FailSyncAt(1, false) // only the next fsync fails: no retry may paper over it
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := p.Append(idData(uint64(100+g)), 0)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	failed := 0
	for err := range errs {
		if err != nil {
			if !errors.Is(err, storage.ErrFailed) || !errors.Is(err, faultfs.ErrInjected) {
				t.Fatalf("append error %v: want ErrFailed wrapping the injected error", err)
			}
			failed++
		}
	}
	if failed == 0 {
		t.Fatal("no append saw the fsync failure")
	}
	if _, err := p.Append([]byte("x"), 0); !errors.Is(err, storage.ErrFailed) {
		t.Fatalf("append after failure: %v", err)
	}
	if err := p.Settle(0); !errors.Is(err, storage.ErrFailed) {
		t.Fatalf("settle after failure: %v", err)
	}
	if err := p.Sync(); !errors.Is(err, storage.ErrFailed) {
		t.Fatalf("sync after failure: %v", err)
	}
	if err := p.Close(); !errors.Is(err, storage.ErrFailed) {
		t.Fatalf("close after failure: %v", err)
	}
	after := fsys.Crash(rand.New(rand.NewPCG(1, 2)))
	o.FS = after
	p, err = storage.OpenPartition("/d", o)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i, off := range good {
		r, err := p.Read(off)
		if err != nil || checksum(r.Data) != checksum(idData(uint64(i))) {
			t.Fatalf("confirmed offset %d after fail-stop and power loss: %v", off, err)
		}
	}
}

// TestWriteFailureIsFailStop: a failed write fails the batch and the partition.
func TestWriteFailureIsFailStop(t *testing.T) {
	fsys := faultfs.New()
	p, err := storage.OpenPartition("/d", storage.Options{FS: fsys, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Append([]byte("ok"), 0); err != nil {
		t.Fatal(err)
	}
	fsys.FailWriteAt(1)
	if _, err := p.Append([]byte("bad"), 0); !errors.Is(err, storage.ErrFailed) {
		t.Fatalf("append with failing write: %v", err)
	}
	if _, err := p.Append([]byte("later"), 0); !errors.Is(err, storage.ErrFailed) {
		t.Fatalf("append after failure: %v", err)
	}
	p.Close()
}
