package wire

import (
	"bytes"
	"errors"
	"runtime"
	"testing"
)

// measure returns the average allocation count and bytes of one f call.
func measure(runs int, f func()) (allocs float64, bytesPerRun uint64) {
	f() // warm up
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	allocs = testing.AllocsPerRun(runs, f)
	runtime.ReadMemStats(&after)
	// AllocsPerRun does runs+1 calls.
	return allocs, (after.TotalAlloc - before.TotalAlloc) / uint64(runs+1)
}

// TestHugeCountsFailFast feeds small bodies whose counts or lengths read
// 0xFFFFFFFF. Each must fail as truncated after at most a
// few KiB of allocation.
func TestHugeCountsFailFast(t *testing.T) {
	ff := []byte{0xff, 0xff, 0xff, 0xff}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	topicT := []byte{0, 0, 0, 1, 't'}
	cases := []struct {
		name string
		op   Op
		body []byte
	}{
		{"publish headers", OpPublish, cat([]byte("FPB1"), topicT, []byte{0}, make([]byte, 4), []byte{0, 0}, ff, make([]byte, 12))},
		{"publish topic", OpPublish, cat([]byte("FPB1"), ff, make([]byte, 22))},
		{"publish payload", OpPublish, cat([]byte("FPB1"), topicT, []byte{0}, make([]byte, 4), []byte{0, 0}, make([]byte, 4), make([]byte, 8), []byte{0}, make([]byte, 8), ff)},
		{"deliver headers", OpDeliver, cat([]byte("FDL1"), make([]byte, 8), topicT, []byte{0}, make([]byte, 4+32), []byte{0}, ff, make([]byte, 4))},
		{"ack tags", OpAck, cat([]byte("FAK1"), topicT, []byte{0}, make([]byte, 4), ff, make([]byte, 12))},
		{"assignment", OpAssignmentChanged, cat([]byte("FAC1"), topicT, []byte{0}, topicT, make([]byte, 8), ff, make([]byte, 8))},
		{"subscribe_stream filter", OpSubscribeStream, cat([]byte("FSP1"), topicT, make([]byte, 4), []byte{0, 0}, ff, make([]byte, 12))},
		{"reconcile_client", OpReconcileClient, cat([]byte("FRC1"), []byte{1}, ff, make([]byte, 25))},
		{"reconcile_server", OpReconcileServer, cat([]byte("FRS1"), ff, make([]byte, 26))},
		{"reconcile_result", OpReconcileResult, cat([]byte("FRR1"), ff, make([]byte, 22))},
		{"topology queues", OpTopologyOK, cat([]byte("FTO1"), make([]byte, 8), ff, make([]byte, 20))},
		{"topology streams", OpTopologyUpdate, cat([]byte("FTU1"), make([]byte, 8), make([]byte, 4), ff, make([]byte, 20))},
		{"topology owners", OpTopologyOK, cat([]byte("FTO1"), make([]byte, 8), []byte{0, 0, 0, 1}, topicT, make([]byte, 4), []byte{0}, ff, make([]byte, 12))},
		{"redirect owners", OpRedirect, cat([]byte("FRD1"), topicT, make([]byte, 4), []byte{0}, ff, make([]byte, 12))},
		{"redirect tags", OpRedirect, cat([]byte("FRD1"), topicT, make([]byte, 4), []byte{0}, []byte{0, 0, 0, 1}, topicT, []byte{0, 1}, ff, make([]byte, 8))},
		{"hello name", OpHello, cat([]byte("FHL1"), ff, make([]byte, 22))},
		{"error message", OpError, cat([]byte("FER1"), []byte{1, 0x90}, ff, make([]byte, 20))},
		{"forwarded", OpForwardedSession, cat([]byte("FFS2"), ff, make([]byte, 22))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if len(c.body) > 64 {
				t.Fatalf("body is %d bytes; keep crafted bodies small", len(c.body))
			}
			b, _ := NewBody(c.op)
			if err := b.Decode(c.body); !errors.Is(err, ErrTruncated) {
				t.Fatalf("got %v, want truncated", err)
			}
			allocs, n := measure(50, func() {
				b, _ := NewBody(c.op)
				_ = b.Decode(c.body)
			})
			if n > 4096 {
				t.Errorf("%d bytes (%v allocs) allocated per decode", n, allocs)
			}
		})
	}
}

// TestCorruptedCountsBounded overwrites every 4-byte window of every vector
// with 0xFFFFFFFF and with a merely large count: decoding must never
// allocate more than a small multiple of the body size.
func TestCorruptedCountsBounded(t *testing.T) {
	vecs := loadVectors(t)
	for name, exp := range expectedVectors {
		in := vecs[name]
		for i := 4; i+4 <= len(in); i++ {
			for _, v := range [][]byte{{0xff, 0xff, 0xff, 0xff}, {0x00, 0x00, 0x10, 0x00}, {0x7f, 0xff, 0xff, 0xf0}} {
				b := bytes.Clone(in)
				copy(b[i:], v)
				_, n := measure(3, func() { _, _ = DecodeBody(exp.op, b) })
				if limit := uint64(2048 + 64*len(b)); n > limit {
					t.Errorf("%s with %x at %d: %d bytes allocated (limit %d)", name, v, i, n, limit)
				}
			}
		}
	}
}

func samplePublish() *Publish {
	return &Publish{
		Topic: "orders.eu", Group: Some("billing"), Partition: 3, RequireConfirm: true,
		ContentType: ContentType{Tag: ContentJSON},
		Headers:     Headers{{"trace-id", "4bf92f3577b34da6a3ce929d0e0e4736"}, {"fibril.client.producer_seq", "42"}},
		Published:   1700000000000, PartitionKey: Some([]byte("customer-1234")),
		PartitioningVersion: 2, Payload: bytes.Repeat([]byte{'x'}, 1024), TTLMillis: Some[uint64](60000),
	}
}

func sampleDeliver() *Deliver {
	return &Deliver{
		SubID: 17, Topic: "orders.eu", Group: Some("billing"), Partition: 3, Offset: 123456,
		DeliveryTag: 987654, Published: 1700000000000, PublishReceived: 1700000000005,
		ContentType: ContentType{Tag: ContentJSON},
		Headers:     Headers{{"trace-id", "4bf92f3577b34da6a3ce929d0e0e4736"}, {"fibril.retries", "1"}},
		Payload:     bytes.Repeat([]byte{'x'}, 1024),
	}
}

// TestHotPathAllocations pins the hard targets: decoding PUBLISH or DELIVER
// into a reused value costs one allocation (all strings), and encoding into
// a reused buffer costs none.
func TestHotPathAllocations(t *testing.T) {
	pub := samplePublish().AppendTo(nil)
	del := sampleDeliver().AppendTo(nil)
	var p Publish
	var d Deliver
	if a := testing.AllocsPerRun(100, func() { _ = p.Decode(pub) }); a > 1 {
		t.Errorf("Publish.Decode: %v allocs, want ≤ 1", a)
	}
	if a := testing.AllocsPerRun(100, func() { _ = d.Decode(del) }); a > 1 {
		t.Errorf("Deliver.Decode: %v allocs, want ≤ 1", a)
	}
	if !bytes.Equal(p.AppendTo(nil), pub) || !bytes.Equal(d.AppendTo(nil), del) {
		t.Fatal("reused decode does not round-trip")
	}
	// Payload aliases the input; strings do not.
	if &p.Payload[0] != &pub[len(pub)-9-1024] {
		t.Error("Publish.Payload does not alias the input buffer")
	}
	buf := make([]byte, 0, 4096)
	sp, sd := samplePublish(), sampleDeliver()
	if a := testing.AllocsPerRun(100, func() { buf = AppendFrame(buf[:0], OpPublish, 1, sp) }); a != 0 {
		t.Errorf("encode PUBLISH: %v allocs", a)
	}
	if a := testing.AllocsPerRun(100, func() { buf = AppendFrame(buf[:0], OpDeliver, 1, sd) }); a != 0 {
		t.Errorf("encode DELIVER: %v allocs", a)
	}
	// Aliased slices are capacity-limited: appending must not clobber the
	// bytes after them in the buffer.
	before := bytes.Clone(pub)
	_ = append(p.PartitionKey.Value, 'Z')
	_ = append(p.Payload, 'Z')
	if !bytes.Equal(pub, before) {
		t.Error("append to a decoded slice wrote into the input buffer")
	}
}
