package host

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/plugins/internal/frame"
)

// encodeFrame encodes one frame.
func encodeFrame(typ byte, payload []byte) []byte {
	b := make([]byte, frame.HeaderLen+len(payload))
	frame.PutHeader(b, typ, len(payload))
	copy(b[frame.HeaderLen:], payload)
	return b
}

// decodeAll decodes frames until an error; it returns the stream bytes,
// whether FIN and RESET were seen, and the error. Bounded: every frame
// consumes at least a header.
func decodeAll(t testing.TB, data []byte) (out []byte, fins, resets int, err error) {
	fr := frame.NewReader(bytes.NewReader(data))
	buf := make([]byte, 7) // small, so payloads arrive piecewise
	for range len(data)/frame.HeaderLen + 1 {
		typ, n, reason, err := fr.Next()
		if err != nil {
			return out, fins, resets, err
		}
		switch typ {
		case frame.Data:
			if n > frame.MaxPayload {
				t.Fatalf("DATA of %d bytes accepted", n)
			}
			for fr.Remaining() > 0 {
				m, err := fr.ReadData(buf)
				out = append(out, buf[:m]...)
				if err != nil {
					return out, fins, resets, err
				}
			}
		case frame.FIN:
			fins++
		case frame.Reset:
			if len(reason) > frame.MaxResetReason {
				t.Fatalf("reason of %d bytes accepted", len(reason))
			}
			resets++
		default:
			t.Fatalf("next returned type %d", typ)
		}
	}
	return out, fins, resets, io.EOF
}

func TestFrameRoundTrip(t *testing.T) {
	var in bytes.Buffer
	in.Write(encodeFrame(frame.Data, []byte("hello ")))
	in.Write(encodeFrame(frame.Data, nil))
	in.Write(encodeFrame(frame.Data, bytes.Repeat([]byte("x"), frame.MaxPayload)))
	in.Write(encodeFrame(frame.FIN, nil))
	in.Write(encodeFrame(frame.Reset, []byte("why")))
	out, fins, resets, err := decodeAll(t, in.Bytes())
	if !errors.Is(err, io.EOF) || fins != 1 || resets != 1 || len(out) != 6+frame.MaxPayload || string(out[:6]) != "hello " {
		t.Fatalf("decoded %d bytes, %d FIN, %d RESET, %v", len(out), fins, resets, err)
	}
}

func TestFrameMalformed(t *testing.T) {
	big := encodeFrame(frame.Data, nil)
	frame.PutHeader(big, frame.Data, frame.MaxPayload+1)
	longFIN := encodeFrame(frame.FIN, []byte("x"))
	longReset := encodeFrame(frame.Reset, nil)
	frame.PutHeader(longReset, frame.Reset, frame.MaxResetReason+1)
	for name, data := range map[string][]byte{
		"oversized DATA":  big,
		"FIN payload":     longFIN,
		"oversized RESET": longReset,
		"unknown type":    encodeFrame(9, nil),
		"zero type":       make([]byte, frame.HeaderLen),
	} {
		if _, _, _, err := decodeAll(t, data); !errors.Is(err, frame.ErrMalformed) {
			t.Errorf("%s: %v, want frame.ErrMalformed", name, err)
		}
	}
	for name, data := range map[string][]byte{
		"short header":  {frame.Data, 0, 0},
		"short payload": encodeFrame(frame.Data, []byte("abc"))[:frame.HeaderLen+1],
		"short reason":  encodeFrame(frame.Reset, []byte("abc"))[:frame.HeaderLen+1],
	} {
		if _, _, _, err := decodeAll(t, data); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("%s: %v, want io.ErrUnexpectedEOF", name, err)
		}
	}
}

// readStream feeds data to a hostStream as its plugin would and reads it
// to the end, returning the bytes and the final error.
func readStream(t testing.TB, data []byte) ([]byte, error) {
	a, b := net.Pipe()
	go func() {
		_, _ = a.Write(data)
		a.Close()
	}()
	s := newHostStream(b, "", nil, nil, nil)
	defer s.Close()
	_ = s.SetReadDeadline(time.Now().Add(10 * time.Second))
	var out []byte
	buf := make([]byte, 1000)
	for range len(data) + 2 {
		n, err := s.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			return out, err
		}
	}
	t.Fatal("reader did not end")
	return nil, nil
}

// The reader's end says how the stream ended: io.EOF only after FIN, an
// abort after RESET, a lost connection or garbage.
func TestHostStreamEnds(t *testing.T) {
	ok := append(encodeFrame(frame.Data, []byte("abc")), encodeFrame(frame.FIN, nil)...)
	if out, err := readStream(t, ok); err != io.EOF || string(out) != "abc" {
		t.Fatalf("FIN: %q, %v", out, err)
	}
	for name, data := range map[string][]byte{
		"RESET":       append(encodeFrame(frame.Data, []byte("abc")), encodeFrame(frame.Reset, []byte("peer gone"))...),
		"lost":        encodeFrame(frame.Data, []byte("abc")),
		"cut":         encodeFrame(frame.Data, []byte("abc"))[:6],
		"garbage":     append(encodeFrame(frame.Data, []byte("abc")), 0xff, 1, 2, 3, 4),
		"nothing":     nil,
		"bytes after": append(encodeFrame(frame.Data, []byte("abc")), 1),
	} {
		out, err := readStream(t, data)
		if !errors.Is(err, core.ErrStreamAborted) {
			t.Errorf("%s: %v, want ErrStreamAborted", name, err)
		}
		if name == "RESET" && !strings.Contains(err.Error(), "peer gone") {
			t.Errorf("RESET reason lost: %v", err)
		}
		if len(out) > 3 {
			t.Errorf("%s: read %q", name, out)
		}
	}
}

// A read deadline is a timeout, not an end: the frame half read resumes.
func TestHostStreamDeadlineKeepsFraming(t *testing.T) {
	a, b := net.Pipe()
	s := newHostStream(b, "", nil, nil, nil)
	defer s.Close()
	defer a.Close() // first: the FIN of Close then fails at once
	data := append(encodeFrame(frame.Data, []byte("hello")), encodeFrame(frame.FIN, nil)...)
	go func() { _, _ = a.Write(data[:3]) }() // half a header
	_ = s.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	buf := make([]byte, 10)
	if _, err := s.Read(buf); !frame.IsTimeout(err) || errors.Is(err, core.ErrStreamAborted) {
		t.Fatalf("Read past the deadline: %v, want a timeout", err)
	}
	go func() { _, _ = a.Write(data[3:]) }()
	_ = s.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := s.Read(buf)
	if err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("Read after the timeout: %q, %v", buf[:n], err)
	}
	if _, err := s.Read(buf); err != io.EOF {
		t.Fatalf("Read at FIN: %v", err)
	}
}

// A write cut short by its deadline (the coalescer is full: the plugin
// stalls) keeps the rest of its frame, which is queued first next time:
// the plugin reads every byte in order.
func TestHostStreamWriteDeadlineKeepsFraming(t *testing.T) {
	a, b := net.Pipe()
	s := newHostStream(b, "", nil, nil, nil)
	defer s.Close()
	payload := make([]byte, 4*hostCoalesceLimit)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	got := make(chan []byte, 1)
	partial := make(chan struct{})
	go func() {
		// Take a little, stall until the writer timed out, then decode
		// everything.
		prefix := make([]byte, 2000)
		if _, err := io.ReadFull(a, prefix); err != nil {
			got <- nil
			return
		}
		<-partial
		fr := frame.NewReader(io.MultiReader(bytes.NewReader(prefix), a))
		var out []byte
		buf := make([]byte, 4096)
		for range 100000 {
			typ, _, _, err := fr.Next()
			if err != nil || typ == frame.FIN {
				break
			}
			for fr.Remaining() > 0 {
				n, err := fr.ReadData(buf)
				out = append(out, buf[:n]...)
				if err != nil {
					break
				}
			}
		}
		got <- out
	}()
	_ = s.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
	n, err := s.Write(payload)
	if !frame.IsTimeout(err) || n >= len(payload) || errors.Is(err, core.ErrStreamAborted) {
		t.Fatalf("stalled Write: %d of %d, %v; want a timeout", n, len(payload), err)
	}
	close(partial)
	_ = s.SetWriteDeadline(time.Now().Add(30 * time.Second))
	if _, err := s.Write(payload[n:]); err != nil {
		t.Fatalf("Write after the timeout: %v", err)
	}
	if _, err := s.Write([]byte("!")); err != nil {
		t.Fatal(err)
	}
	if err := s.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	select {
	case out := <-got:
		if !bytes.Equal(out, append(payload, '!')) {
			t.Fatalf("plugin read %d bytes, want the %d written, in order", len(out), len(payload)+1)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("reader did not finish")
	}
}

// FuzzTransportFrames feeds arbitrary bytes to the frame decoder and to a
// host stream: nothing panics, limits hold, and io.EOF comes only after a
// FIN.
func FuzzTransportFrames(f *testing.F) {
	f.Add(append(encodeFrame(frame.Data, []byte("abc")), encodeFrame(frame.FIN, nil)...))
	f.Add(encodeFrame(frame.Reset, []byte("reason")))
	f.Add([]byte{frame.Data, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{frame.Reset, 0, 0, 4, 1})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		_, fins, _, _ := decodeAll(t, data)
		out, err := readStream(t, data)
		if err == io.EOF && fins == 0 {
			t.Fatalf("io.EOF without a FIN (read %d bytes)", len(out))
		}
		if err != io.EOF && !errors.Is(err, core.ErrStreamAborted) {
			t.Fatalf("stream ended with %v", err)
		}
	})
}
