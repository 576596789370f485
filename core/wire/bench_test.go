package wire

import "testing"

// Realistic hot-path bodies: a topic, a group, two headers, 1 KiB payload.
// Encoding appends a whole frame into a reused buffer; decoding reuses the
// body value, as the session layer does.

func BenchmarkEncodePublish1KiB(b *testing.B) {
	p := samplePublish()
	buf := make([]byte, 0, 4096)
	b.SetBytes(int64(len(p.AppendTo(nil))))
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendFrame(buf[:0], OpPublish, 42, p)
	}
}

func BenchmarkDecodePublish1KiB(b *testing.B) {
	in := samplePublish().AppendTo(nil)
	var p Publish
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if err := p.Decode(in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeDeliver1KiB(b *testing.B) {
	d := sampleDeliver()
	buf := make([]byte, 0, 4096)
	b.SetBytes(int64(len(d.AppendTo(nil))))
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendFrame(buf[:0], OpDeliver, 42, d)
	}
}

func BenchmarkDecodeDeliver1KiB(b *testing.B) {
	in := sampleDeliver().AppendTo(nil)
	var d Deliver
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if err := d.Decode(in); err != nil {
			b.Fatal(err)
		}
	}
}
