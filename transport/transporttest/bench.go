package transporttest

import (
	"context"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
)

// FrameSize is the frame the benchmarks send: a typical small message with
// its header.
const FrameSize = 1024

// benchWait bounds each benchmark's blocking steps, so a hang fails.
const benchWait = 2 * time.Minute

// benchPair opens two transports with TLS (the production setting) and
// `streams` streams from a to b; serve runs at b for each accepted
// stream. The returned wait blocks until every serve returned.
func benchPair(b *testing.B, cfg Config, streams int, serve func(core.Stream)) ([]core.Stream, func()) {
	b.Helper()
	s := &suite{cfg: cfg, ca: NewCA(b), tls: true}
	ta, tb := s.open(b, "a"), s.open(b, "b")
	var served sync.WaitGroup
	served.Add(streams)
	go func() {
		for i := range streams {
			ctx, cancel := context.WithTimeout(context.Background(), benchWait)
			st, err := tb.Accept(ctx)
			cancel()
			if err != nil {
				b.Errorf("Accept: %v", err)
				for range streams - i { // unblock the waiter
					served.Done()
				}
				return
			}
			go func() {
				defer served.Done()
				defer st.Close()
				st.SetDeadline(time.Now().Add(benchWait))
				serve(st)
			}()
		}
	}()
	l := dial(b, ta, peerOf("b", tb))
	out := make([]core.Stream, streams)
	for i := range out {
		out[i] = openStream(b, l)
		out[i].SetDeadline(time.Now().Add(benchWait))
		// Announce the stream (a transport may show it to the peer only
		// with data): one frame, which serve sees first.
		write(b, out[i], make([]byte, FrameSize))
	}
	return out, served.Wait
}

// split divides n operations between k workers.
func split(n, k, i int) int {
	q := n / k
	if i < n%k {
		q++
	}
	return q
}

// Bench measures one-way throughput: b.N frames of FrameSize bytes,
// pipelined over `streams` streams, counted when the receiver has read
// them all. It reports MB/s (b.SetBytes).
func Bench(b *testing.B, cfg Config, streams int) {
	var got atomic.Int64
	out, served := benchPair(b, cfg, streams, func(st core.Stream) {
		n, _ := io.Copy(io.Discard, st)
		got.Add(n)
	})
	frame := make([]byte, FrameSize)
	b.SetBytes(FrameSize)
	b.ResetTimer()
	var wg sync.WaitGroup
	for i, st := range out {
		wg.Go(func() {
			for range split(b.N, streams, i) {
				if _, err := st.Write(frame); err != nil {
					b.Errorf("Write: %v", err)
					return
				}
			}
			if err := st.CloseWrite(); err != nil {
				b.Errorf("CloseWrite: %v", err)
			}
		})
	}
	wg.Wait()
	served()
	b.StopTimer()
	if want := int64(b.N+streams) * FrameSize; got.Load() != want {
		b.Fatalf("the receiver read %d bytes, want %d", got.Load(), want)
	}
	for _, st := range out {
		st.Close()
	}
}

// BenchRTT measures request/response round trips of FrameSize bytes: b.N
// of them spread over `streams` streams, each waiting for its echo before
// the next. It reports the p50 and p99 round trip in µs.
func BenchRTT(b *testing.B, cfg Config, streams int) {
	out, served := benchPair(b, cfg, streams, func(st core.Stream) {
		buf := make([]byte, FrameSize)
		if _, err := io.ReadFull(st, buf); err != nil { // the announcement
			return
		}
		for {
			if _, err := io.ReadFull(st, buf); err != nil {
				return
			}
			if _, err := st.Write(buf); err != nil {
				return
			}
		}
	})
	lat := make([][]time.Duration, streams)
	b.ResetTimer()
	var wg sync.WaitGroup
	for i, st := range out {
		wg.Go(func() {
			req, resp := make([]byte, FrameSize), make([]byte, FrameSize)
			n := split(b.N, streams, i)
			lat[i] = make([]time.Duration, 0, n)
			for range n {
				start := time.Now()
				if _, err := st.Write(req); err != nil {
					b.Errorf("Write: %v", err)
					return
				}
				if _, err := io.ReadFull(st, resp); err != nil {
					b.Errorf("read the response: %v", err)
					return
				}
				lat[i] = append(lat[i], time.Since(start))
			}
			st.CloseWrite()
		})
	}
	wg.Wait()
	served()
	b.StopTimer()
	ReportLatency(b, slices.Concat(lat...))
	for _, st := range out {
		st.Close()
	}
}

// ReportLatency reports the p50 and p99 of round trips in µs; baselines
// outside the suite use it so their numbers read the same.
func ReportLatency(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	q := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(q(0.50), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
}
