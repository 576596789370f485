package queue

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/fibrilgo/fibril/core/storage/faultfs"
	"github.com/fibrilgo/fibril/core/wire"
)

// S-82 under power loss (unsynced writes lost at a random moment,
// faultfs): a durable stream's confirmed records survive at their
// confirmed offsets with their payloads, and a durable cursor is never
// past the recovered log (a record is delivered, so acknowledged, only
// once it is on disk; a cursor may move back, S-76, never forward).
func TestStreamPowerLossKeepsConfirmedRecords(t *testing.T) {
	seeds := 30
	if testing.Short() {
		seeds = 8
	}
	for seed := range uint64(seeds) {
		rng := rand.New(rand.NewPCG(seed, 17))
		fs := faultfs.New()
		opts := crashOptions(fs)
		m, err := Open(opts)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.DeclareStream(StreamSpec{Topic: "events", Durability: wire.DurabilityDurable}); err != nil {
			t.Fatal(err)
		}
		sp, err := m.StreamPartition("events", 0)
		if err != nil {
			t.Fatal(err)
		}
		r := &recorder{}
		sub, err := sp.Subscribe(r, StreamSubscribeOptions{DurableName: "c", Prefetch: 64})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		confirmed := map[uint64]string{} // offset → payload
		target := 20 + rng.IntN(200)
		reached := make(chan struct{})
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { // the publisher
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				payload := fmt.Sprintf("s%d-%d", seed, i)
				err := sp.Publish(&Message{Payload: []byte(payload)}, func(off uint64, err error) {
					if err != nil {
						return
					}
					mu.Lock()
					confirmed[off] = payload
					if len(confirmed) == target {
						close(reached)
					}
					mu.Unlock()
				})
				if err != nil {
					return
				}
			}
		}()
		arng := rand.New(rand.NewPCG(rng.Uint64(), 1)) // the reader's own
		go func() {                                    // the reader acks what it got now and then
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if ds := r.take(); len(ds) > 0 && arng.IntN(2) == 0 {
					sub.Ack(ds[len(ds)-1].Tag)
				}
			}
		}()
		<-reached
		crashed := fs.Crash(rng)
		close(stop)
		wg.Wait()
		sub.Close()
		m.Close() // errors expected: the old filesystem is gone

		m2, err := Open(crashOptions(crashed))
		if err != nil {
			t.Fatalf("seed %d: reopen: %v", seed, err)
		}
		sp2, err := m2.StreamPartition("events", 0)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		_, next := sp2.Bounds()
		mu.Lock()
		for off := range confirmed {
			if off >= next {
				t.Fatalf("seed %d: confirmed offset %d lost (log ends at %d)", seed, off, next)
			}
		}
		mu.Unlock()
		r2 := &recorder{}
		sub2, err := sp2.Subscribe(r2, StreamSubscribeOptions{Start: wire.StreamStart{Kind: wire.StartEarliest}})
		if err != nil {
			t.Fatal(err)
		}
		ds := waitN(t, r2, int(next))
		for _, d := range ds {
			if want, ok := confirmed[d.Offset]; ok && string(d.Payload) != want {
				t.Fatalf("seed %d: offset %d holds %q, confirmed as %q", seed, d.Offset, d.Payload, want)
			}
		}
		sub2.Close()
		if cur, ok := sp2.Cursor("c"); ok && cur > next {
			t.Fatalf("seed %d: cursor %d past the recovered log end %d", seed, cur, next)
		}
		m2.Close()
	}
}
