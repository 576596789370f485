package wire

import (
	"encoding/binary"
	"fmt"
	"io"
)

// HeaderSize is the fixed frame header length (docs/protocol.md#frames).
const HeaderSize = 20

// ProtocolVersion is the value senders write in the header version field
// and the only protocol_version HELLO may ask for (docs/protocol.md#frames).
const ProtocolVersion = 1

// Compliance is the exact 55-byte marker HELLO_OK must carry; every SDK
// compares it byte for byte and abandons the connection on mismatch.
const Compliance = "v=1;license=MIT;ai_train=disallowed;policy=AI_POLICY.md"

// FrameHeader is the 20-byte frame header (docs/protocol.md#frames).
type FrameHeader struct {
	BodyLen   uint32 // body bytes after the header
	Version   uint16 // senders write 1; never checked on receipt
	Op        Op
	Flags     uint32 // senders write 0; never checked on receipt
	RequestID uint64 // correlation id (docs/protocol.md#request-ids)
}

// ParseFrameHeader parses the first HeaderSize bytes of b. It fails only if
// b is shorter than a header: version and flags are deliberately not
// checked (docs/protocol.md#frames), and any op code is accepted here — unknown ops
// are the dispatcher's business (docs/protocol.md#malformed).
func ParseFrameHeader(b []byte) (FrameHeader, error) {
	if len(b) < HeaderSize {
		return FrameHeader{}, fmt.Errorf("wire: frame header of %d bytes: %w", len(b), ErrTruncated)
	}
	return FrameHeader{
		BodyLen:   binary.BigEndian.Uint32(b[0:4]),
		Version:   binary.BigEndian.Uint16(b[4:6]),
		Op:        Op(binary.BigEndian.Uint16(b[6:8])),
		Flags:     binary.BigEndian.Uint32(b[8:12]),
		RequestID: binary.BigEndian.Uint64(b[12:20]),
	}, nil
}

// AppendFrameHeader appends h exactly as given (no defaults applied).
func AppendFrameHeader(dst []byte, h FrameHeader) []byte {
	dst = binary.BigEndian.AppendUint32(dst, h.BodyLen)
	dst = binary.BigEndian.AppendUint16(dst, h.Version)
	dst = binary.BigEndian.AppendUint16(dst, uint16(h.Op))
	dst = binary.BigEndian.AppendUint32(dst, h.Flags)
	return binary.BigEndian.AppendUint64(dst, h.RequestID)
}

// AppendFrame appends a complete frame: a header with version 1, flags 0,
// the given op and request id, then body's encoding (magic included). A nil
// body gives an empty body (AUTH_OK, PING, PONG). body_len is back-filled
// once the body is written, so the body is encoded exactly once. It panics
// if the body exceeds 2^32-1 bytes, which v1 cannot express. Pass a nil
// interface, not a nil *T, for an empty body.
func AppendFrame(dst []byte, op Op, requestID uint64, body Encoder) []byte {
	start := len(dst)
	dst = AppendFrameHeader(dst, FrameHeader{Version: ProtocolVersion, Op: op, RequestID: requestID})
	if body != nil {
		dst = body.AppendTo(dst)
	}
	n := len(dst) - start - HeaderSize
	if uint64(n) > 1<<32-1 {
		panic("wire: frame body longer than 2^32-1 bytes")
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(n))
	return dst
}

// ReadFrame reads one frame from r.
//
// The body-size cap is applied as soon as the header is parsed, before any
// body byte is read or any memory is allocated for it: a header announcing
// more than maxBody bytes returns the parsed header with a
// *FrameTooLargeError (errors.Is(err, ErrFrameTooLarge)), so the caller can
// answer ERROR 400 with that request id and close (docs/protocol.md#answers). The stream is not
// resynchronised. maxBody is taken literally: 0 admits only empty bodies,
// math.MaxUint32 means no cap.
//
// The returned body reuses buf's backing array when cap(buf) >= BodyLen,
// otherwise it is a new slice of BodyLen bytes whose allocation grows with
// the bytes received (see readGrowing), so an announced size alone cannot
// make the reader allocate up to the cap. When cap(buf) >=
// HeaderSize the header is also read through buf, so a reused buffer makes
// ReadFrame allocation-free. The body is only valid until buf is reused.
//
// End of input exactly at a frame boundary returns io.EOF; end of input
// inside a header or body returns io.ErrUnexpectedEOF. Other read errors are
// returned as they are.
func ReadFrame(r io.Reader, buf []byte, maxBody uint32) (FrameHeader, []byte, error) {
	var hb []byte
	if cap(buf) >= HeaderSize {
		hb = buf[:HeaderSize]
	} else {
		hb = make([]byte, HeaderSize)
	}
	if _, err := io.ReadFull(r, hb); err != nil {
		return FrameHeader{}, nil, err // io.EOF only if nothing was read
	}
	h, _ := ParseFrameHeader(hb)
	if h.BodyLen > maxBody {
		return h, nil, &FrameTooLargeError{Header: h, Max: maxBody}
	}
	if uint64(cap(buf)) >= uint64(h.BodyLen) {
		body := buf[:h.BodyLen]
		if _, err := io.ReadFull(r, body); err != nil {
			return h, nil, bodyReadErr(err)
		}
		return h, body, nil
	}
	body, err := readGrowing(r, int(h.BodyLen))
	if err != nil {
		return h, nil, bodyReadErr(err)
	}
	return h, body, nil
}

// growStep bounds how much ReadFrame allocates ahead of the bytes that have
// actually arrived. A peer that announces a large body and then stalls pins
// at most this much (plus what it really sent), not the whole announced size.
const growStep = 1 << 20

// readGrowing reads exactly n bytes into a new slice whose capacity grows
// with the data received: at most growStep bytes, or the bytes already read,
// beyond what arrived. Bodies up to growStep are read with one allocation.
func readGrowing(r io.Reader, n int) ([]byte, error) {
	body := make([]byte, 0, min(n, growStep))
	for len(body) < n {
		if len(body) == cap(body) {
			next := make([]byte, len(body), min(n, 2*cap(body)))
			copy(next, body)
			body = next
		}
		m, err := io.ReadFull(r, body[len(body):cap(body)])
		body = body[:len(body)+m]
		if err != nil {
			return nil, err
		}
	}
	return body, nil
}

// bodyReadErr turns a clean EOF into ErrUnexpectedEOF: the header promised
// a body, so running out of input inside it is always unexpected.
func bodyReadErr(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
