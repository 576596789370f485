package core

import (
	"errors"
	"fmt"

	"github.com/fibrilgo/fibril/core/wire"
)

// Sentinel errors. Code returns the wire code each one is answered with
// (docs/protocol.md#answers says which situation gets which). Wrap them with context —
// fmt.Errorf("queue %q: %w", name, core.ErrNotFound) — the message travels
// to the client verbatim, so write it for the person reading the SDK error.
var (
	ErrBadRequest     = errors.New("invalid request")            // 400
	ErrUnauthorized   = errors.New("authentication required")    // 401
	ErrForbidden      = errors.New("forbidden")                  // 403
	ErrNotFound       = errors.New("not found")                  // 404
	ErrConflict       = errors.New("conflict")                   // 409
	ErrTooLarge       = errors.New("payload too large")          // 413
	ErrInternal       = errors.New("internal error")             // 500
	ErrUnavailable    = errors.New("unavailable, retry shortly") // 503
	ErrOutcomeUnknown = errors.New("owner did not answer; outcome unknown")
)

var codes = []struct {
	err  error
	code uint16
}{
	{ErrBadRequest, wire.CodeBadRequest},
	{ErrUnauthorized, wire.CodeUnauthorized},
	{ErrForbidden, wire.CodeForbidden},
	{ErrNotFound, wire.CodeNotFound},
	{ErrConflict, wire.CodeConflict},
	{ErrTooLarge, wire.CodePayloadTooLarge},
	{ErrInternal, wire.CodeInternal},
	{ErrUnavailable, wire.CodeUnavailable},
	{ErrOutcomeUnknown, wire.CodeOutcomeUnknown},
}

// Code returns the Fibril error code for err: the code of the first
// sentinel it wraps, or 500 for anything else (an unclassified failure is a
// broker-side fault, and 500 is retryable).
func Code(err error) uint16 {
	for _, c := range codes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	return wire.CodeInternal
}

// Sentinel is Code's inverse: the sentinel answered with code, or nil for
// a code no sentinel has (a peer's or a broker's ERROR back to an error
// that errors.Is can match).
func Sentinel(code uint16) error {
	for _, c := range codes {
		if c.code == code {
			return c.err
		}
	}
	return nil
}

// Errorf wraps a sentinel with a formatted message, keeping the message
// free of the sentinel's own text: Errorf(ErrNotFound, "queue %q", q)
// reads `queue "x"` on the wire, and errors.Is(err, ErrNotFound) holds.
func Errorf(sentinel error, format string, args ...any) error {
	return &codedError{msg: fmt.Sprintf(format, args...), sentinel: sentinel}
}

type codedError struct {
	msg      string
	sentinel error
}

func (e *codedError) Error() string { return e.msg }
func (e *codedError) Unwrap() error { return e.sentinel }
