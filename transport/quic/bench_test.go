package quic

import (
	"io"
	"testing"
	"time"
)

// BenchmarkQUIC_SmallWritePackets checks that pipelined 1 KiB writes on
// one stream are packed into packets by quic-go rather than sent one
// packet each: it reports QUIC packets sent per 1 KiB write (below 1
// means writes share packets).
func BenchmarkQUIC_SmallWritePackets(b *testing.B) {
	ca := newTestCA(b)
	x := openNode(b, ca, "a", "", nil)
	y := openNode(b, ca, "b", "", nil)
	s := openStream(b, x, y)
	in := accept(b, y)
	done := make(chan int64, 1)
	go func() {
		_ = in.SetReadDeadline(time.Now().Add(2 * time.Minute))
		n, _ := io.Copy(io.Discard, in)
		done <- n
	}()
	frame := make([]byte, 1024)
	before := packetsSent(s)
	b.SetBytes(int64(len(frame)))
	b.ResetTimer()
	for range b.N {
		if _, err := s.Write(frame); err != nil {
			b.Fatal(err)
		}
	}
	_ = s.CloseWrite()
	if n := <-done; n != int64(b.N*len(frame)) {
		b.Fatalf("read %d bytes", n)
	}
	b.StopTimer()
	b.ReportMetric(float64(packetsSent(s)-before)/float64(b.N), "packets/write")
	_ = s.Close()
}
