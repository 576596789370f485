package plugins

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
)

// The data plane of an external transport: each stream's bytes cross the
// process boundary on a unix connection of their own, in frames
//
//	[type u8][length u32, big endian][payload]
//
// rather than as one gRPC message per write (the control plane would add a
// protobuf encoding, an HTTP/2 frame and a scheduler hop to every write).
// A raw byte copy would be cheaper still but could not tell an orderly end
// from an abort: a unix connection only ever ends with EOF, so the two
// ends are frames of their own.
const (
	// frameData carries stream bytes.
	frameData byte = 1
	// frameFIN ends the sender's direction in order (CloseWrite): the
	// receiver reads io.EOF after the bytes before it.
	frameFIN byte = 2
	// frameReset aborts the stream; its payload is an optional reason.
	frameReset byte = 3

	frameHeaderLen = 5
	// maxFramePayload caps a DATA frame, so that a reader never needs more
	// than one fixed buffer and a corrupt length cannot ask for gigabytes.
	maxFramePayload = 64 << 10
	// maxResetReason caps a RESET reason: it is read whole (it must fit the
	// reader's buffer) and only ever logged or put in an error message.
	maxResetReason = 1024
	// tokenLen is the size of the one-time token that claims a stream.
	tokenLen = 16
	// frameBufSize is the buffer of a frame reader: a whole header plus
	// the largest payload, so a DATA frame usually arrives in one read.
	frameBufSize = frameHeaderLen + maxFramePayload
)

// errMalformedFrame is wrapped by a decoding error: the peer does not
// speak the framing, and the stream cannot be trusted any further.
var errMalformedFrame = errors.New("malformed transport frame")

// frameReader decodes frames from a connection. It is safe against read
// deadlines: a header is only consumed once it has arrived whole (Peek
// keeps partial input buffered), and a DATA payload is handed out
// piecewise, so a timeout mid-frame loses nothing and the next call
// resumes where this one stopped.
type frameReader struct {
	br *bufio.Reader
	// remaining is what is left of the current DATA frame's payload.
	remaining int
}

func newFrameReader(r io.Reader) *frameReader {
	return &frameReader{br: bufio.NewReaderSize(r, frameBufSize)}
}

// next reads the next frame's header, and for FIN and RESET the whole
// frame (reason holds RESET's payload). For DATA, the payload is read
// afterwards with readData. Must not be called while remaining > 0.
func (f *frameReader) next() (typ byte, length int, reason string, err error) {
	hdr, err := f.br.Peek(frameHeaderLen)
	if err != nil {
		if len(hdr) > 0 && errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, 0, "", err
	}
	typ = hdr[0]
	n := binary.BigEndian.Uint32(hdr[1:])
	switch typ {
	case frameData:
		if n > maxFramePayload {
			return 0, 0, "", fmt.Errorf("%w: DATA of %d bytes (at most %d)", errMalformedFrame, n, maxFramePayload)
		}
		_, _ = f.br.Discard(frameHeaderLen)
		f.remaining = int(n)
		return typ, int(n), "", nil
	case frameFIN:
		if n != 0 {
			return 0, 0, "", fmt.Errorf("%w: FIN with a %d byte payload", errMalformedFrame, n)
		}
		_, _ = f.br.Discard(frameHeaderLen)
		return typ, 0, "", nil
	case frameReset:
		if n > maxResetReason {
			return 0, 0, "", fmt.Errorf("%w: RESET reason of %d bytes (at most %d)", errMalformedFrame, n, maxResetReason)
		}
		whole, err := f.br.Peek(frameHeaderLen + int(n))
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return 0, 0, "", err
		}
		reason = string(whole[frameHeaderLen:])
		_, _ = f.br.Discard(len(whole))
		return typ, int(n), reason, nil
	}
	return 0, 0, "", fmt.Errorf("%w: unknown type %d", errMalformedFrame, typ)
}

// readData reads up to len(p) bytes of the current DATA payload.
func (f *frameReader) readData(p []byte) (int, error) {
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

// putFrameHeader writes a header into b[:frameHeaderLen].
func putFrameHeader(b []byte, typ byte, length int) {
	b[0] = typ
	binary.BigEndian.PutUint32(b[1:frameHeaderLen], uint32(length))
}

// writeControlFrame writes a FIN, or a RESET with reason (cut to
// maxResetReason), in one write.
func writeControlFrame(w io.Writer, typ byte, reason string) error {
	if len(reason) > maxResetReason {
		reason = reason[:maxResetReason]
	}
	b := make([]byte, frameHeaderLen+len(reason))
	putFrameHeader(b, typ, len(reason))
	copy(b[frameHeaderLen:], reason)
	_, err := w.Write(b)
	return err
}

// isTimeout reports a passed deadline, which leaves a stream usable.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
