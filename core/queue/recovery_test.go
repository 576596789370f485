package queue

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/wire"
)

// S-25, S-52: after a restart acked messages never return; ready and
// leased-but-unacked ones are deliverable again (old tags dead); retry
// counts and nack delays survive.
func TestRestartRecovery_S25_S52(t *testing.T) {
	e := newEnv(t)
	p := e.part("jobs", 0)
	e.pubN(p, 10, "m")
	s, r := e.sub(p, 7, false)
	ds := r.take() // 0..6
	s.Ack(ds[0].Tag, ds[1].Tag, ds[2].Tag, ds[3].Tag)
	s.Nack([]uint64{ds[4].Tag}, true, noTime) // retry count 1, ready
	r.take()                                  // its redelivery (leased again)
	s.Nack([]uint64{ds[5].Tag}, true, wire.Some(uint64(e.nowMs()+3600_000)))
	// ds[6] stays leased; 7..9 ready.
	e.restart()

	p = e.part("jobs", 0)
	if d := p.Depth(); d.Ready != 5 || d.Delayed != 1 || d.Inflight != 0 {
		t.Fatalf("depth after restart %+v", d)
	}
	s, r = e.sub(p, 100, false)
	got := r.take()
	if !slices.Equal(offsets(got), []uint64{4, 6, 7, 8, 9}) {
		t.Fatalf("after restart %v, want [4 6 7 8 9]", offsets(got))
	}
	if v, _ := header(got[0], "fibril.retries"); v != "1" {
		t.Fatalf("retry count lost: %+v", got[0].Headers)
	}
	s.Ack(ds[6].Tag) // a tag from before the restart is dead
	if d := p.Depth(); d.Inflight != 5 {
		t.Fatalf("old tag settled something: %+v", d)
	}
	s.Ack(tags(got)...)
	e.clock.Advance(time.Hour)
	late := r.take()
	if !slices.Equal(offsets(late), []uint64{5}) {
		t.Fatalf("delayed retry %v", offsets(late))
	}
	if v, _ := header(late[0], "fibril.retries"); v != "1" {
		t.Fatalf("retry count of the delayed retry lost: %+v", late[0].Headers)
	}
}

// S-38, S-39: publish delays and TTL deadlines survive a restart (they
// live in the records).
func TestRestartKeepsDelaysAndTTL_S38_S39(t *testing.T) {
	e := newEnv(t)
	p := e.part("jobs", 0)
	e.pub(p, "delayed", func(m *Message) { m.NotBefore = uint64(e.nowMs() + 10_000) })
	e.pub(p, "ttl", withTTL(5000))
	e.restart()
	p = e.part("jobs", 0)
	if d := p.Depth(); d.Delayed != 1 || d.Ready != 1 {
		t.Fatalf("depth %+v", d)
	}
	e.clock.Advance(5 * time.Second) // ttl expires with no subscriber
	if d := p.Depth(); d.Ready != 0 || d.Delayed != 1 {
		t.Fatalf("after TTL: %+v", d)
	}
	_, r := e.sub(p, 10, false)
	if got := r.take(); len(got) != 0 {
		t.Fatalf("delivered early %q", payloads(got))
	}
	e.clock.Advance(5 * time.Second)
	wantPayloads(t, r.take(), "delayed")
}

// State journal compaction keeps retry counts and delays (and drops the
// entries of settled messages).
func TestStateCompaction(t *testing.T) {
	old := compactMin
	compactMin = 2048
	t.Cleanup(func() { compactMin = old })
	e := newEnv(t)
	e.m.DeclareQueue(QueueSpec{Key: Key{Topic: "jobs"}, MaxRetries: wire.Some[uint32](1000)})
	p := e.part("jobs", 0)
	e.pubN(p, 3, "m")
	s, r := e.sub(p, 3, false)
	compacted := false
	for i := 0; i < 2000 && !compacted; i++ {
		ds := r.take()
		before := p.log.StateJournalBytes()
		s.Nack(tags(ds[:1]), true, noTime)
		r.ds = append(ds[1:], r.take()...) // keep the rest for the next round
		compacted = p.log.StateJournalBytes() < before
	}
	if !compacted {
		t.Fatal("the state journal never compacted")
	}
	// Bring every message to a known state: 0 retried once more and
	// delayed, the others as they are.
	ds := r.take()
	var retries = map[uint64]string{}
	for _, d := range ds {
		retries[d.Offset], _ = header(d, "fibril.retries")
	}
	s.Nack(tags(ds), true, wire.Some(uint64(e.nowMs()+1000)))
	e.restart()
	p = e.part("jobs", 0)
	if d := p.Depth(); d.Delayed != 3 {
		t.Fatalf("delays lost in compaction: %+v", d)
	}
	_, r = e.sub(p, 10, false)
	e.clock.Advance(time.Second)
	for _, d := range r.take() {
		v, _ := header(d, "fibril.retries")
		if want := atoiPlus1(retries[d.Offset]); v != want {
			t.Fatalf("offset %d retries %q, want %q", d.Offset, v, want)
		}
	}
}

func atoiPlus1(s string) string {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return itoaDec(n + 1)
}

func itoaDec(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// A partition whose files are damaged (not a torn tail) does not fail
// Open: it is reported and answers ErrInternal naming the quarantine.
func TestQuarantinedPartitionAtOpen(t *testing.T) {
	e := newEnv(t)
	e.m.DeclareQueue(QueueSpec{Key: Key{Topic: "jobs"}, PartitionCount: wire.Some[uint32](2)})
	bad := e.part("jobs", 1)
	for range 3 {
		e.pub(bad, strings.Repeat("x", 100))
	}
	e.pub(e.part("jobs", 0), "fine")
	if err := e.m.Close(); err != nil {
		t.Fatal(err)
	}
	seg := filepath.Join(partitionDir(e.opts.Dir, Key{Topic: "jobs"}, 1), "00000000000000000000.log")
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	data[32+24+50] ^= 0xff // inside the first record's payload; intact records follow
	if err := os.WriteFile(seg, data, 0o644); err != nil {
		t.Fatal(err)
	}
	e.open()
	q := e.m.Quarantined()
	if len(q) != 1 || q[0].Topic != "jobs" || q[0].Partition != 1 || q[0].Err == nil {
		t.Fatalf("Quarantined() = %+v", q)
	}
	p1 := e.part("jobs", 1)
	err = p1.Publish(&Message{Payload: []byte("x")}, nil)
	wantCode(t, err, core.ErrInternal)
	if !strings.Contains(err.Error(), "quarantined") || !strings.Contains(err.Error(), "jobs partition 1") {
		t.Fatalf("message %q", err)
	}
	_, err = p1.Subscribe(&recorder{}, SubscribeOptions{Prefetch: 1})
	wantCode(t, err, core.ErrInternal)
	_, r := e.sub(e.part("jobs", 0), 1, false)
	wantPayloads(t, r.take(), "fine")
}
