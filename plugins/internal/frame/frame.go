// Package frame is the data plane of an external transport, shared by
// the plugin SDK (which writes and reads frames in the plugin process) and
// the host (which does the same in the broker): each stream's bytes cross
// the process boundary on a unix connection of their own, in frames
//
//	[type u8][length u32, big endian][payload]
//
// rather than as one gRPC message per write (the control plane would add a
// protobuf encoding, an HTTP/2 frame and a scheduler hop to every write).
// A raw byte copy would be cheaper still but could not tell an orderly end
// from an abort: a unix connection only ever ends with EOF, so the two
// ends are frames of their own.
package frame

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
)

const (
	// Data carries stream bytes.
	Data byte = 1
	// FIN ends the sender's direction in order (CloseWrite): the
	// receiver reads io.EOF after the bytes before it.
	FIN byte = 2
	// Reset aborts the stream; its payload is an optional reason.
	Reset byte = 3

	HeaderLen = 5
	// MaxPayload caps a DATA frame, so that a reader never needs more
	// than one fixed buffer and a corrupt length cannot ask for gigabytes.
	MaxPayload = 64 << 10
	// MaxResetReason caps a RESET reason: it is read whole (it must fit the
	// reader's buffer) and only ever logged or put in an error message.
	MaxResetReason = 1024
	// TokenLen is the size of the one-time token that claims a stream.
	TokenLen = 16
	// bufSize is the buffer of a frame reader: a whole header plus
	// the largest payload, so a DATA frame usually arrives in one read.
	bufSize = HeaderLen + MaxPayload
)

// ErrMalformed is wrapped by a decoding error: the peer does not
// speak the framing, and the stream cannot be trusted any further.
var ErrMalformed = errors.New("malformed transport frame")

// Reader decodes frames from a connection. It is safe against read
// deadlines: a header is only consumed once it has arrived whole (Peek
// keeps partial input buffered), and a DATA payload is handed out
// piecewise, so a timeout mid-frame loses nothing and the next call
// resumes where this one stopped.
type Reader struct {
	br *bufio.Reader
	// remaining is what is left of the current DATA frame's payload.
	remaining int
}

func NewReader(r io.Reader) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, bufSize)}
}

// Next reads the next frame's header, and for FIN and RESET the whole
// frame (reason holds RESET's payload). For DATA, the payload is read
// afterwards with ReadData. Must not be called while remaining > 0.
func (f *Reader) Next() (typ byte, length int, reason string, err error) {
	hdr, err := f.br.Peek(HeaderLen)
	if err != nil {
		if len(hdr) > 0 && errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, 0, "", err
	}
	typ = hdr[0]
	n := binary.BigEndian.Uint32(hdr[1:])
	switch typ {
	case Data:
		if n > MaxPayload {
			return 0, 0, "", fmt.Errorf("%w: DATA of %d bytes (at most %d)", ErrMalformed, n, MaxPayload)
		}
		_, _ = f.br.Discard(HeaderLen)
		f.remaining = int(n)
		return typ, int(n), "", nil
	case FIN:
		if n != 0 {
			return 0, 0, "", fmt.Errorf("%w: FIN with a %d byte payload", ErrMalformed, n)
		}
		_, _ = f.br.Discard(HeaderLen)
		return typ, 0, "", nil
	case Reset:
		if n > MaxResetReason {
			return 0, 0, "", fmt.Errorf("%w: RESET reason of %d bytes (at most %d)", ErrMalformed, n, MaxResetReason)
		}
		whole, err := f.br.Peek(HeaderLen + int(n))
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return 0, 0, "", err
		}
		reason = string(whole[HeaderLen:])
		_, _ = f.br.Discard(len(whole))
		return typ, int(n), reason, nil
	}
	return 0, 0, "", fmt.Errorf("%w: unknown type %d", ErrMalformed, typ)
}

// Remaining is what is left of the current DATA frame's payload: while it
// is not zero, the next bytes are read with ReadData, not Next.
func (f *Reader) Remaining() int { return f.remaining }

// ReadData reads up to len(p) bytes of the current DATA payload.
func (f *Reader) ReadData(p []byte) (int, error) {
	if len(p) > f.remaining {
		p = p[:f.remaining]
	}
	n, err := f.br.Read(p)
	f.remaining -= n
	if err != nil && errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF // the frame promised more
	}
	return n, err
}

// PutHeader writes a header into b[:HeaderLen].
func PutHeader(b []byte, typ byte, length int) {
	b[0] = typ
	binary.BigEndian.PutUint32(b[1:HeaderLen], uint32(length))
}

// WriteControl writes a FIN, or a RESET with reason (cut to
// MaxResetReason), in one write.
func WriteControl(w io.Writer, typ byte, reason string) error {
	if len(reason) > MaxResetReason {
		reason = reason[:MaxResetReason]
	}
	b := make([]byte, HeaderLen+len(reason))
	PutHeader(b, typ, len(reason))
	copy(b[HeaderLen:], reason)
	_, err := w.Write(b)
	return err
}

// IsTimeout reports a passed deadline, which leaves a stream usable.
func IsTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
