package wire

import (
	"errors"
	"strconv"
)

// Sentinel errors. Decoders wrap them in a *DecodeError that records where
// the body went wrong; test for them with errors.Is.
var (
	// ErrTruncated: the body ended before a field, or a count/length asks
	// for more bytes than remain (a length is never trusted past the body).
	ErrTruncated = errors.New("truncated")
	// ErrTrailingBytes: bytes left after the last field.
	ErrTrailingBytes = errors.New("trailing bytes")
	// ErrBadMagic: the first four bytes are not the op's magic.
	ErrBadMagic = errors.New("bad magic")
	// ErrBadBool: a bool byte other than 0 or 1.
	ErrBadBool = errors.New("invalid bool")
	// ErrBadOptionTag: an option presence tag other than 0 or 1.
	ErrBadOptionTag = errors.New("invalid option tag")
	// ErrBadEnum: an enum8 or content-type tag outside its table.
	ErrBadEnum = errors.New("enum value out of range")
	// ErrInvalidUTF8: a str field that is not valid UTF-8.
	ErrInvalidUTF8 = errors.New("invalid UTF-8")
	// ErrBadBatch: a replication read answer's batch breaks the offset
	// rules (docs/protocol.md#replication-ops): a record below
	// requested_offset, offsets not consecutive, a record at 2^64-1, or
	// next_offset below the last offset plus one.
	ErrBadBatch = errors.New("replication batch offsets out of order")
	// ErrUnknownOp: DecodeBody or NewBody was given an op this package does
	// not know. The session layer answers ERROR 400 "unknown opcode N"
	// (docs/protocol.md#malformed).
	ErrUnknownOp = errors.New("unknown opcode")
	// ErrUnsupportedOp: the op is known but its body is not implemented
	// here. Every known op has a codec today, so DecodeBody does not
	// return it; it stays so that a known op added to the table before
	// its body still fails cleanly.
	ErrUnsupportedOp = errors.New("no body codec for op")
	// ErrFrameTooLarge: a frame header announced a body above the caller's
	// cap (docs/protocol.md#frames: answer ERROR 400 and close).
	ErrFrameTooLarge = errors.New("frame too large")
	// ErrBadHopCount is not produced by any decoder: hop_count is a semantic
	// check made by the owner after a successful decode (docs/protocol.md#owner-side). It is
	// returned by ForwardedSession.Validate.
	ErrBadHopCount = errors.New("forwarded session hop count must be 1")
)

// DecodeError describes a malformed body: which op, which field, and the
// byte offset (from the start of the body, magic included) where the
// offending field or the trailing bytes start. Err is one of the sentinel
// errors above.
type DecodeError struct {
	Op     Op
	Field  string // "" for whole-body conditions such as trailing bytes
	Offset int
	Err    error
}

// Error reads like `malformed PUBLISH: field "headers": truncated at byte 37`.
func (e *DecodeError) Error() string {
	s := "malformed " + e.Op.String() + ": "
	if e.Field != "" {
		s += "field " + strconv.Quote(e.Field) + ": "
	}
	return s + e.Err.Error() + " at byte " + strconv.Itoa(e.Offset)
}

// Unwrap returns the sentinel so errors.Is works.
func (e *DecodeError) Unwrap() error { return e.Err }

// FrameTooLargeError is returned by ReadFrame when a header announces a
// body larger than the caller's limit. It carries the parsed header so the
// caller can echo the request id in its ERROR 400 (docs/protocol.md#answers).
type FrameTooLargeError struct {
	Header FrameHeader
	Max    uint32
}

func (e *FrameTooLargeError) Error() string {
	return "wire: " + e.Header.Op.String() + " frame body of " +
		strconv.FormatUint(uint64(e.Header.BodyLen), 10) + " bytes exceeds the limit of " +
		strconv.FormatUint(uint64(e.Max), 10) + " bytes"
}

// Unwrap returns ErrFrameTooLarge.
func (e *FrameTooLargeError) Unwrap() error { return ErrFrameTooLarge }

// Error codes carried by the FER1 body (docs/protocol.md#answers, docs/protocol.md#code-504).
const (
	CodeUnsupportedVersion uint16 = 1   // HELLO_ERR: protocol_version ≠ 1
	CodeBadRequest         uint16 = 400 // malformed or invalid request
	CodeUnauthorized       uint16 = 401 // authentication required or failed
	CodeForbidden          uint16 = 403 // node principal required (docs/protocol.md#replication-ops, docs/protocol.md#extensions)
	CodeNotFound           uint16 = 404 // queue/stream (partition) unknown
	CodeConflict           uint16 = 409 // not the owner / conflicting state
	CodePayloadTooLarge    uint16 = 413 // payload above the message size cap
	CodeTLSRequired        uint16 = 426 // plaintext client on a TLS listener
	CodeInternal           uint16 = 500 // broker-side fault
	CodeUnavailable        uint16 = 503 // not serviceable here right now
	CodeOutcomeUnknown     uint16 = 504 // gateway: owner did not answer
)

// CodeRetryable reports the retry advice every SDK gives for an error code
// (docs/protocol.md#answers): 409 and every code ≥ 500 are retryable; everything else (1, 400,
// 401, 403, 404, 413, 426 and unknown codes below 500) is not. REDIRECT and
// transport failures are retryable too, but they carry no code.
func CodeRetryable(code uint16) bool {
	return code == CodeConflict || code >= 500
}
