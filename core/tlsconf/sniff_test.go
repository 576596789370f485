package tlsconf

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// helloHeader is a plaintext frame header: body length 37, version 1,
// opcode 1 (HELLO), flags 0, request id id.
func helloHeader(id uint64) []byte {
	h := make([]byte, 20)
	binary.BigEndian.PutUint32(h[0:], 37)
	binary.BigEndian.PutUint16(h[4:], 1)
	binary.BigEndian.PutUint16(h[6:], 1)
	binary.BigEndian.PutUint64(h[12:], id)
	return h
}

// tlsHello is the start of a TLS record carrying a ClientHello.
var tlsHello = append([]byte{0x16, 0x03, 0x01, 0x00, 0xf4, 0x01, 0x00, 0x00, 0xf0, 0x03, 0x03}, make([]byte, 40)...)

type sniffResult struct {
	kind   SniffKind
	prefix []byte
	err    error
}

// pipeSniff runs Sniff on one end of a pipe while send drives the other.
func pipeSniff(t *testing.T, timeout time.Duration, send func(c net.Conn)) (net.Conn, sniffResult) {
	t.Helper()
	srv, cli := net.Pipe()
	t.Cleanup(func() { srv.Close(); cli.Close() })
	go send(cli)
	k, p, err := Sniff(srv, timeout)
	return srv, sniffResult{k, p, err}
}

func TestSniffTLS(t *testing.T) {
	srv, r := pipeSniff(t, time.Second, func(c net.Conn) { _, _ = c.Write(tlsHello) })
	if r.kind != SniffTLS || r.err != nil || len(r.prefix) != SniffBytes {
		t.Fatalf("got %v %d bytes %v", r.kind, len(r.prefix), r.err)
	}
	// Replay hands the whole stream, from its first byte, to the next reader.
	got := make([]byte, len(tlsHello))
	if _, err := io.ReadFull(Replay(srv, r.prefix), got); err != nil || string(got) != string(tlsHello) {
		t.Fatalf("replayed %x, %v", got, err)
	}
}

func TestSniffPlaintext(t *testing.T) {
	frame := append(helloHeader(0x0102030405060708), make([]byte, 37)...)
	srv, r := pipeSniff(t, time.Second, func(c net.Conn) { _, _ = c.Write(frame) })
	if r.kind != SniffPlaintext || r.err != nil {
		t.Fatalf("got %v %v", r.kind, r.err)
	}
	id, ok := PlaintextOnTLSRequestID(r.prefix)
	if !ok || id != 0x0102030405060708 {
		t.Fatalf("request id %x %v", id, ok)
	}
	got := make([]byte, len(frame))
	if _, err := io.ReadFull(Replay(srv, r.prefix), got); err != nil || string(got) != string(frame) {
		t.Fatalf("replay: %v", err)
	}
}

// Garbage is rejected as soon as two bytes show it, without waiting for a
// header that will never come.
func TestSniffUnknown(t *testing.T) {
	for _, first := range [][]byte{[]byte("GE"), {0x16, 0x02}, {0x00, 0x01}, {0x17, 0x03}} {
		_, r := pipeSniff(t, 5*time.Second, func(c net.Conn) { _, _ = c.Write(first) })
		if r.kind != SniffUnknown || r.err != nil || len(r.prefix) != 2 {
			t.Fatalf("%x: got %v %x %v", first, r.kind, r.prefix, r.err)
		}
	}
}

// A sender that trickles the header byte by byte within the timeout still
// gets classified with its full request id.
func TestSniffSlowSender(t *testing.T) {
	hdr := helloHeader(42)
	_, r := pipeSniff(t, 5*time.Second, func(c net.Conn) {
		for _, b := range hdr {
			time.Sleep(2 * time.Millisecond)
			if _, err := c.Write([]byte{b}); err != nil {
				return
			}
		}
	})
	if id, ok := PlaintextOnTLSRequestID(r.prefix); r.kind != SniffPlaintext || !ok || id != 42 {
		t.Fatalf("got %v id=%d ok=%v err=%v", r.kind, id, ok, r.err)
	}
}

// A header that does not complete within the timeout is dropped, and the
// deadline Sniff set is cleared afterwards.
func TestSniffTimeout(t *testing.T) {
	release := make(chan struct{})
	start := time.Now()
	srv, r := pipeSniff(t, 100*time.Millisecond, func(c net.Conn) {
		_, _ = c.Write(helloHeader(7)[:5])
		<-release
		_, _ = c.Write([]byte("later"))
	})
	if r.kind != SniffDrop || !errors.Is(r.err, os.ErrDeadlineExceeded) || len(r.prefix) != 5 {
		t.Fatalf("got %v %d bytes %v", r.kind, len(r.prefix), r.err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Fatalf("timeout took %v", el)
	}
	time.Sleep(150 * time.Millisecond) // past the sniff deadline
	close(release)
	buf := make([]byte, 5)
	if _, err := io.ReadFull(srv, buf); err != nil {
		t.Fatalf("read after Sniff hit a stale deadline: %v", err)
	}
}

func TestSniffEarlyEOF(t *testing.T) {
	for _, n := range []int{0, 1} {
		_, r := pipeSniff(t, time.Second, func(c net.Conn) {
			_, _ = c.Write(helloHeader(1)[:n])
			c.Close()
		})
		if r.kind != SniffDrop || !errors.Is(r.err, io.EOF) {
			t.Fatalf("%d bytes then EOF: got %v %v", n, r.kind, r.err)
		}
	}
	// Two or more bytes then EOF still classify; a truncated plaintext
	// header has no request id to echo.
	_, r := pipeSniff(t, time.Second, func(c net.Conn) {
		_, _ = c.Write(helloHeader(9)[:10])
		c.Close()
	})
	if r.kind != SniffPlaintext || r.err != nil || len(r.prefix) != 10 {
		t.Fatalf("10 bytes then EOF: got %v %d %v", r.kind, len(r.prefix), r.err)
	}
	if _, ok := PlaintextOnTLSRequestID(r.prefix); ok {
		t.Fatal("request id from a truncated header")
	}
	_, r = pipeSniff(t, time.Second, func(c net.Conn) {
		_, _ = c.Write([]byte{0x16, 0x03, 0x01})
		c.Close()
	})
	if r.kind != SniffTLS || r.err != nil {
		t.Fatalf("3 TLS bytes then EOF: got %v %v", r.kind, r.err)
	}
}

func TestPlaintextOnTLSRequestIDRejectsTLS(t *testing.T) {
	if _, ok := PlaintextOnTLSRequestID(tlsHello[:20]); ok {
		t.Fatal("request id taken from a TLS record")
	}
	if SniffPlaintext.String() != "plaintext" || SniffKind(9).String() != "SniffKind(9)" {
		t.Fatal("String")
	}
}
