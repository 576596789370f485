package wire

import (
	"bytes"
	"errors"
	"io"
	"math"
	"runtime"
	"testing"
	"testing/iotest"
)

func frames(t *testing.T) ([]byte, []FrameHeader, [][]byte) {
	t.Helper()
	bodies := []Encoder{
		&Hello{ClientName: "c", ClientVersion: "v", ProtocolVersion: 1},
		nil,
		&Publish{Topic: "orders", Payload: bytes.Repeat([]byte{7}, 300)},
		&ErrorBody{Code: 409, Message: "not owner"},
	}
	ops := []Op{OpHello, OpPing, OpPublish, OpError}
	var stream []byte
	var hs []FrameHeader
	var bs [][]byte
	for i, b := range bodies {
		start := len(stream)
		stream = AppendFrame(stream, ops[i], uint64(i+1)*1000, b)
		h, err := ParseFrameHeader(stream[start:])
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
		bs = append(bs, stream[start+HeaderSize:])
	}
	return stream, hs, bs
}

func readAll(t *testing.T, r io.Reader, buf []byte, hs []FrameHeader, bs [][]byte) {
	t.Helper()
	for i := range hs {
		h, body, err := ReadFrame(r, buf, 1<<20)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if h != hs[i] || !bytes.Equal(body, bs[i]) {
			t.Fatalf("frame %d: got %+v %x, want %+v %x", i, h, body, hs[i], bs[i])
		}
	}
	if _, _, err := ReadFrame(r, buf, 1<<20); err != io.EOF {
		t.Fatalf("after last frame: %v, want io.EOF", err)
	}
}

func TestReadFrameSeveralFramesOneBuffer(t *testing.T) {
	stream, hs, bs := frames(t)
	for i := range bs { // bs alias stream; trim each to its own body
		bs[i] = bs[i][:hs[i].BodyLen]
	}
	readAll(t, bytes.NewReader(stream), nil, hs, bs)
	readAll(t, bytes.NewReader(stream), make([]byte, 0, 4096), hs, bs)
}

func TestReadFrameSplitAcrossReads(t *testing.T) {
	stream, hs, bs := frames(t)
	for i := range bs {
		bs[i] = bs[i][:hs[i].BodyLen]
	}
	readAll(t, iotest.OneByteReader(bytes.NewReader(stream)), nil, hs, bs)
	readAll(t, iotest.HalfReader(bytes.NewReader(stream)), make([]byte, 0, 64), hs, bs)
	readAll(t, iotest.DataErrReader(bytes.NewReader(stream)), nil, hs, bs)
}

func TestReadFrameEOF(t *testing.T) {
	frame := AppendFrame(nil, OpPublishOK, 9, &PublishOK{Offset: 1})
	for n := 0; n <= len(frame); n++ {
		_, _, err := ReadFrame(bytes.NewReader(frame[:n]), nil, 1<<20)
		switch {
		case n == 0:
			if err != io.EOF {
				t.Errorf("empty input: %v, want io.EOF", err)
			}
		case n < len(frame):
			if err != io.ErrUnexpectedEOF {
				t.Errorf("%d of %d bytes: %v, want io.ErrUnexpectedEOF", n, len(frame), err)
			}
		default:
			if err != nil {
				t.Errorf("whole frame: %v", err)
			}
		}
	}
	// Other read errors pass through unchanged.
	boom := errors.New("boom")
	if _, _, err := ReadFrame(iotest.ErrReader(boom), nil, 10); err != boom {
		t.Errorf("got %v", err)
	}
}

// limitReader fails the test if ReadFrame asks for more than max bytes.
type limitReader struct {
	t    *testing.T
	r    io.Reader
	max  int
	read int
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.read >= l.max {
		l.t.Fatalf("ReadFrame read past byte %d", l.max)
	}
	if len(p) > l.max-l.read {
		p = p[:l.max-l.read]
	}
	n, err := l.r.Read(p)
	l.read += n
	return n, err
}

func TestReadFrameTooLarge(t *testing.T) {
	hdr := AppendFrameHeader(nil, FrameHeader{BodyLen: math.MaxUint32, Version: 1, Op: OpPublish, RequestID: 77})
	stream := append(hdr, make([]byte, 64)...)

	lr := &limitReader{t: t, r: bytes.NewReader(stream), max: HeaderSize}
	h, body, err := ReadFrame(lr, nil, 1<<20)
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("got %v, want ErrFrameTooLarge", err)
	}
	if h.RequestID != 77 || h.Op != OpPublish || h.BodyLen != math.MaxUint32 || body != nil {
		t.Fatalf("header %+v body %v", h, body)
	}
	var fe *FrameTooLargeError
	if !errors.As(err, &fe) || fe.Max != 1<<20 || fe.Header != h {
		t.Fatalf("error %#v", err)
	}
	if got, want := err.Error(), "wire: PUBLISH frame body of 4294967295 bytes exceeds the limit of 1048576 bytes"; got != want {
		t.Fatalf("message %q, want %q", got, want)
	}

	// Nothing near BodyLen is allocated: only the error value.
	buf := make([]byte, 0, 64)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	allocs := testing.AllocsPerRun(100, func() {
		_, _, err := ReadFrame(bytes.NewReader(hdr), buf, 1<<20)
		if !errors.Is(err, ErrFrameTooLarge) {
			panic(err)
		}
	})
	runtime.ReadMemStats(&after)
	if allocs > 2 {
		t.Errorf("%v allocations per rejected frame", allocs)
	}
	if d := after.TotalAlloc - before.TotalAlloc; d > 101*1024 {
		t.Errorf("%d bytes allocated for 101 rejected frames", d)
	}

	// The cap is inclusive; 0 admits only empty bodies.
	frame := AppendFrame(nil, OpPublishOK, 1, &PublishOK{})
	if _, _, err := ReadFrame(bytes.NewReader(frame), nil, uint32(len(frame)-HeaderSize)); err != nil {
		t.Errorf("body exactly at the cap: %v", err)
	}
	if _, _, err := ReadFrame(bytes.NewReader(frame), nil, 0); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("cap 0: %v", err)
	}
	ping := AppendFrame(nil, OpPing, 1, nil)
	if _, _, err := ReadFrame(bytes.NewReader(ping), nil, 0); err != nil {
		t.Errorf("empty body, cap 0: %v", err)
	}
}

func TestReadFrameBufferReuse(t *testing.T) {
	frame := AppendFrame(nil, OpDeliver, 5, &Deliver{Topic: "t", Payload: make([]byte, 100)})
	bodyLen := len(frame) - HeaderSize

	buf := make([]byte, 0, 512)
	_, body, err := ReadFrame(bytes.NewReader(frame), buf, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if &body[0] != &buf[:1][0] {
		t.Error("body does not reuse buf")
	}

	small := make([]byte, 0, 30)
	_, body, err = ReadFrame(bytes.NewReader(frame), small, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if len(body) != bodyLen || cap(body) != bodyLen {
		t.Errorf("fresh body len %d cap %d, want exactly %d", len(body), cap(body), bodyLen)
	}

	rd := bytes.NewReader(frame)
	allocs := testing.AllocsPerRun(100, func() {
		rd.Reset(frame)
		if _, _, err := ReadFrame(rd, buf, 1<<20); err != nil {
			panic(err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations with a reused buffer, want 0", allocs)
	}
}

// Version and flags are never checked (docs/protocol.md#frames).
func TestFrameHeaderVersionFlagsIgnored(t *testing.T) {
	h := FrameHeader{BodyLen: 0, Version: 7, Op: Op(999), Flags: 0xdeadbeef, RequestID: 1<<64 - 1}
	b := AppendFrameHeader(nil, h)
	if len(b) != HeaderSize {
		t.Fatalf("header is %d bytes", len(b))
	}
	got, err := ParseFrameHeader(b)
	if err != nil || got != h {
		t.Fatalf("got %+v %v", got, err)
	}
	rh, _, err := ReadFrame(bytes.NewReader(b), nil, 0)
	if err != nil || rh != h {
		t.Fatalf("ReadFrame: %+v %v", rh, err)
	}
	if _, err := ParseFrameHeader(b[:19]); !errors.Is(err, ErrTruncated) {
		t.Fatalf("short header: %v", err)
	}
}

// A peer that announces a 60 MiB body (below the cap) and then sends only a
// few bytes must not make the reader allocate the announced size.
func TestReadFrameAnnouncedSizeDoesNotPinMemory(t *testing.T) {
	const announced = 60 << 20
	hdr := AppendFrameHeader(nil, FrameHeader{BodyLen: announced, Version: 1, Op: OpPublish, RequestID: 9})
	in := io.MultiReader(bytes.NewReader(hdr), bytes.NewReader(make([]byte, 100)))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, _, err := ReadFrame(in, nil, 64<<20)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err = %v, want io.ErrUnexpectedEOF", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 4<<20 {
		t.Fatalf("allocated %d bytes for a 100-byte partial body; want at most a few MiB", grew)
	}
}

// Bodies larger than one growth step still arrive intact.
func TestReadFrameLargeBodyIntact(t *testing.T) {
	body := make([]byte, 5*growStep+123)
	for i := range body {
		body[i] = byte(i * 7)
	}
	frame := append(AppendFrameHeader(nil, FrameHeader{BodyLen: uint32(len(body)), Version: 1, Op: OpPublish}), body...)
	_, got, err := ReadFrame(iotest.HalfReader(bytes.NewReader(frame)), nil, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, body) {
		t.Fatal("large body corrupted")
	}
}
