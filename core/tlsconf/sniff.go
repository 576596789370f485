package tlsconf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// SniffKind is what the first bytes of an accepted socket look like
// (docs/protocol.md#transport, S-151).
type SniffKind int

const (
	// SniffDrop: nothing to answer — the peer closed after fewer than 2
	// bytes, did not deliver a frame header within the timeout, or the read
	// failed. Close without writing.
	SniffDrop SniffKind = iota
	// SniffTLS: a TLS record header (16 03). A TLS listener runs the
	// handshake; a plaintext listener closes without writing (the SDK then
	// reports that the broker is probably plaintext).
	SniffTLS
	// SniffPlaintext: a Fibril frame header (its body length's two high
	// bytes are 00 00). A plaintext listener serves it; a TLS listener
	// writes one plaintext ERROR 426 echoing PlaintextOnTLSRequestID and
	// closes.
	SniffPlaintext
	// SniffUnknown: anything else. Close without writing.
	SniffUnknown
)

func (k SniffKind) String() string {
	switch k {
	case SniffDrop:
		return "drop"
	case SniffTLS:
		return "tls"
	case SniffPlaintext:
		return "plaintext"
	case SniffUnknown:
		return "unknown"
	}
	return fmt.Sprintf("SniffKind(%d)", int(k))
}

// SniffBytes is how much Sniff waits for: one frame header.
const SniffBytes = 20

// Sniff reads the first bytes of an accepted connection and classifies
// them. Like upstream it waits for a full frame header (20 bytes) or EOF,
// for at most timeout (upstream uses 10 s; timeout <= 0 waits forever), so
// that a plaintext HELLO's request id is available for the 426 answer.
// Bytes that are neither a TLS record nor a frame header are rejected as
// soon as the first two arrive: there is nothing to wait for.
//
// prefix holds every byte read (at most 20); hand it to Replay so the TLS
// stack or the session reader sees the stream from its first byte. EOF
// after 2 to 19 bytes still classifies (the next reader meets the EOF
// itself). err is set only with SniffDrop and says why, for debug logs:
// io.EOF, a timeout (os.ErrDeadlineExceeded) or a read error. The read
// deadline is cleared before Sniff returns.
func Sniff(conn net.Conn, timeout time.Duration) (kind SniffKind, prefix []byte, err error) {
	if timeout > 0 {
		if err := conn.SetReadDeadline(time.Now().Add(timeout)); err != nil {
			return SniffDrop, nil, err
		}
		defer conn.SetReadDeadline(time.Time{})
	}
	buf := make([]byte, SniffBytes)
	n := 0
	for n < SniffBytes {
		k, rerr := conn.Read(buf[n:])
		n += k
		if n >= 2 && classify(buf[:n]) == SniffUnknown {
			return SniffUnknown, buf[:n], nil
		}
		if rerr == nil {
			continue
		}
		if errors.Is(rerr, io.EOF) && n >= 2 {
			break
		}
		return SniffDrop, buf[:n], rerr
	}
	return classify(buf[:n]), buf[:n], nil
}

func classify(b []byte) SniffKind {
	switch {
	case b[0] == 0x16 && b[1] == 0x03:
		return SniffTLS
	case b[0] == 0x00 && b[1] == 0x00:
		return SniffPlaintext
	}
	return SniffUnknown
}

// PlaintextOnTLSRequestID returns the request id of a sniffed plaintext
// frame header (big-endian u64 at bytes 12..19), which the 426 answer on a
// TLS listener must echo. It reports false when prefix is not a plaintext
// header or the peer closed before sending all 20 bytes; answer with id 0
// then, or just close.
func PlaintextOnTLSRequestID(prefix []byte) (uint64, bool) {
	if len(prefix) < SniffBytes || classify(prefix) != SniffPlaintext {
		return 0, false
	}
	return binary.BigEndian.Uint64(prefix[12:20]), true
}

// Replay returns a net.Conn whose reads yield prefix first and then the
// rest of conn, undoing the sniff for the next reader. Writes, deadlines
// and Close go straight to conn.
func Replay(conn net.Conn, prefix []byte) net.Conn {
	if len(prefix) == 0 {
		return conn
	}
	return &replayConn{Conn: conn, pending: append([]byte(nil), prefix...)}
}

type replayConn struct {
	net.Conn
	pending []byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// CloseWrite half-closes the wrapped connection when it can (TCP), so a
// graceful close sends FIN after the last frame.
func (c *replayConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// PlainTCP returns the TCP socket this plaintext connection reads from,
// once the replayed bytes are all read: a reader may then go to the
// socket directly (core/session reads idle connections that way).
func (c *replayConn) PlainTCP() (*net.TCPConn, bool) {
	tcp, ok := c.Conn.(*net.TCPConn)
	return tcp, ok && len(c.pending) == 0
}

// NetConn returns the wrapped connection (for TCP options), as tls.Conn
// does.
func (c *replayConn) NetConn() net.Conn { return c.Conn }
