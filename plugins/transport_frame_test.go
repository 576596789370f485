package plugins

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
)

// frame encodes one frame.
func frame(typ byte, payload []byte) []byte {
	b := make([]byte, frameHeaderLen+len(payload))
	putFrameHeader(b, typ, len(payload))
	copy(b[frameHeaderLen:], payload)
	return b
}

// decodeAll decodes frames until an error; it returns the stream bytes,
// whether FIN and RESET were seen, and the error. Bounded: every frame
// consumes at least a header.
func decodeAll(t testing.TB, data []byte) (out []byte, fins, resets int, err error) {
	fr := newFrameReader(bytes.NewReader(data))
	buf := make([]byte, 7) // small, so payloads arrive piecewise
	for range len(data)/frameHeaderLen + 1 {
		typ, n, reason, err := fr.next()
		if err != nil {
			return out, fins, resets, err
		}
		switch typ {
		case frameData:
			if n > maxFramePayload {
				t.Fatalf("DATA of %d bytes accepted", n)
			}
			for fr.remaining > 0 {
				m, err := fr.readData(buf)
				out = append(out, buf[:m]...)
				if err != nil {
					return out, fins, resets, err
				}
			}
		case frameFIN:
			fins++
		case frameReset:
			if len(reason) > maxResetReason {
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
	in.Write(frame(frameData, []byte("hello ")))
	in.Write(frame(frameData, nil))
	in.Write(frame(frameData, bytes.Repeat([]byte("x"), maxFramePayload)))
	in.Write(frame(frameFIN, nil))
	in.Write(frame(frameReset, []byte("why")))
	out, fins, resets, err := decodeAll(t, in.Bytes())
	if !errors.Is(err, io.EOF) || fins != 1 || resets != 1 || len(out) != 6+maxFramePayload || string(out[:6]) != "hello " {
		t.Fatalf("decoded %d bytes, %d FIN, %d RESET, %v", len(out), fins, resets, err)
	}
}

func TestFrameMalformed(t *testing.T) {
	big := frame(frameData, nil)
	putFrameHeader(big, frameData, maxFramePayload+1)
	longFIN := frame(frameFIN, []byte("x"))
	longReset := frame(frameReset, nil)
	putFrameHeader(longReset, frameReset, maxResetReason+1)
	for name, data := range map[string][]byte{
		"oversized DATA":  big,
		"FIN payload":     longFIN,
		"oversized RESET": longReset,
		"unknown type":    frame(9, nil),
		"zero type":       make([]byte, frameHeaderLen),
	} {
		if _, _, _, err := decodeAll(t, data); !errors.Is(err, errMalformedFrame) {
			t.Errorf("%s: %v, want errMalformedFrame", name, err)
		}
	}
	for name, data := range map[string][]byte{
		"short header":  {frameData, 0, 0},
		"short payload": frame(frameData, []byte("abc"))[:frameHeaderLen+1],
		"short reason":  frame(frameReset, []byte("abc"))[:frameHeaderLen+1],
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
	ok := append(frame(frameData, []byte("abc")), frame(frameFIN, nil)...)
	if out, err := readStream(t, ok); err != io.EOF || string(out) != "abc" {
		t.Fatalf("FIN: %q, %v", out, err)
	}
	for name, data := range map[string][]byte{
		"RESET":       append(frame(frameData, []byte("abc")), frame(frameReset, []byte("peer gone"))...),
		"lost":        frame(frameData, []byte("abc")),
		"cut":         frame(frameData, []byte("abc"))[:6],
		"garbage":     append(frame(frameData, []byte("abc")), 0xff, 1, 2, 3, 4),
		"nothing":     nil,
		"bytes after": append(frame(frameData, []byte("abc")), 1),
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
	data := append(frame(frameData, []byte("hello")), frame(frameFIN, nil)...)
	go func() { _, _ = a.Write(data[:3]) }() // half a header
	_ = s.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	buf := make([]byte, 10)
	if _, err := s.Read(buf); !isTimeout(err) || errors.Is(err, core.ErrStreamAborted) {
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
		fr := newFrameReader(io.MultiReader(bytes.NewReader(prefix), a))
		var out []byte
		buf := make([]byte, 4096)
		for range 100000 {
			typ, _, _, err := fr.next()
			if err != nil || typ == frameFIN {
				break
			}
			for fr.remaining > 0 {
				n, err := fr.readData(buf)
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
	if !isTimeout(err) || n >= len(payload) || errors.Is(err, core.ErrStreamAborted) {
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
	f.Add(append(frame(frameData, []byte("abc")), frame(frameFIN, nil)...))
	f.Add(frame(frameReset, []byte("reason")))
	f.Add([]byte{frameData, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{frameReset, 0, 0, 4, 1})
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
