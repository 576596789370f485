package queue

import (
	"sync"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/storage"
)

// Run alone (the machine has two cores):
//
//	go test -run='^$' -bench=. -benchtime=200000x ./core/queue

// The fsync=none variants show the engine's own CPU cost, independent of
// the disk (and of whoever else is using it).
func benchManager(b *testing.B, fsync storage.FsyncPolicy) *Manager {
	m, err := Open(Options{
		Dir:        b.TempDir(), // the real disk: fsyncs cost what they cost
		Storage:    storage.Options{Fsync: fsync, Logger: quietLogger()},
		AutoCreate: true,
		Logger:     quietLogger(),
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	return m
}

// Confirmed publish of 1 KiB messages with 256 in flight under
// fsync=always: the publish half of the broker's ≥ 90k msgs/s target.
func BenchmarkPublishConfirmed(b *testing.B) {
	b.Run("fsync=always", func(b *testing.B) { benchPublish(b, storage.FsyncAlways) })
	b.Run("fsync=none", func(b *testing.B) { benchPublish(b, storage.FsyncNone) })
}

func benchPublish(b *testing.B, fsync storage.FsyncPolicy) {
	m := benchManager(b, fsync)
	p, err := m.Partition(Key{Topic: "bench"}, 0)
	if err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 1024)
	credit := make(chan struct{}, 256)
	var wg sync.WaitGroup
	done := func(_ uint64, err error) {
		if err != nil {
			b.Error(err)
		}
		<-credit
		wg.Done()
	}
	b.SetBytes(1024)
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		credit <- struct{}{}
		wg.Add(1)
		if err := p.Publish(&Message{Payload: payload, Received: time.Now().UnixMilli()}, done); err != nil {
			b.Fatal(err)
		}
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}

// acker is a consumer whose Deliver queues the tag for a goroutine that
// acks it, as a session would (the channel holds the whole prefetch).
type acker chan uint64

func (a acker) Deliver(d *Delivery) bool { a <- d.Tag; return true }

// Publish → deliver → ack round trip with one consumer (prefetch 256)
// and confirmed publishes (256 in flight, fsync=always): the engine half
// of the broker's ≥ 40k msgs/s end-to-end target. acks=single calls Ack
// once per tag (one journal write each, as for one ACK frame per
// message); acks=batched hands every tag waiting to one Ack call, as a
// session that coalesces the ACK frames it has read could.
func BenchmarkRoundTrip(b *testing.B) {
	b.Run("fsync=always/acks=single", func(b *testing.B) { benchRoundTrip(b, storage.FsyncAlways, false) })
	b.Run("fsync=always/acks=batched", func(b *testing.B) { benchRoundTrip(b, storage.FsyncAlways, true) })
	b.Run("fsync=none/acks=single", func(b *testing.B) { benchRoundTrip(b, storage.FsyncNone, false) })
}

func benchRoundTrip(b *testing.B, fsync storage.FsyncPolicy, batched bool) {
	m := benchManager(b, fsync)
	p, err := m.Partition(Key{Topic: "bench"}, 0)
	if err != nil {
		b.Fatal(err)
	}
	ch := make(acker, 256)
	s, err := p.Subscribe(ch, SubscribeOptions{Prefetch: 256})
	if err != nil {
		b.Fatal(err)
	}
	acked := make(chan struct{})
	go func() {
		tags := make([]uint64, 0, 256)
		for n := 0; n < b.N; {
			tags = append(tags[:0], <-ch)
			for len(tags) < cap(tags) && len(ch) > 0 {
				tags = append(tags, <-ch)
			}
			if batched {
				s.Ack(tags...)
			} else {
				for _, t := range tags { // one tag per ACK frame, as the SDKs send
					s.Ack(t)
				}
			}
			n += len(tags)
		}
		close(acked)
	}()
	payload := make([]byte, 1024)
	credit := make(chan struct{}, 256)
	done := func(_ uint64, err error) {
		if err != nil {
			b.Error(err)
		}
		<-credit
	}
	b.SetBytes(1024)
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		credit <- struct{}{}
		if err := p.Publish(&Message{Payload: payload, Received: time.Now().UnixMilli()}, done); err != nil {
			b.Fatal(err)
		}
	}
	<-acked
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}
