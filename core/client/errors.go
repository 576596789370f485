package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/wire"
)

// Sentinel errors returned by the client. Test for them with errors.Is.
var (
	// ErrClosed: the Client (or the Subscription) was closed.
	ErrClosed = errors.New("fibril client: closed")
	// ErrStaleDelivery: the delivery came from a session the broker did not
	// resume, so its tag is void; nothing was sent (docs/protocol.md#resume). The broker
	// redelivers the message.
	ErrStaleDelivery = errors.New("fibril client: stale delivery (session not resumed)")
	// ErrAlreadySettled: Ack, Retry or Fail was already called for the delivery.
	ErrAlreadySettled = errors.New("fibril client: delivery already settled")
	// ErrOutcomeUnknown: the request was written but no answer can come any
	// more (its socket died, the caller gave up, or a gateway answered 504).
	// It may or may not have taken effect, and the client never replays it.
	ErrOutcomeUnknown = errors.New("fibril client: request outcome unknown")
	// ErrTooManyRedirects: an operation was redirected more than
	// Options.MaxRedirects times.
	ErrTooManyRedirects = errors.New("fibril client: too many redirects")
	// ErrProtocol: the broker broke the wire protocol (unexpected frame
	// during the handshake, bad compliance marker, malformed reply, ...).
	ErrProtocol = errors.New("fibril client: protocol violation")
	// ErrTLSRequired: the broker answered 426, it only speaks TLS.
	ErrTLSRequired = errors.New("fibril client: broker requires TLS")
	// ErrHeartbeatTimeout: nothing arrived for 3× the heartbeat interval.
	ErrHeartbeatTimeout = errors.New("fibril client: heartbeat timeout")
	// ErrConnectionLost: the connection ended (read or write failure, or the
	// client dropped it after an uncorrelated ERROR).
	ErrConnectionLost = errors.New("fibril client: connection lost")
	// ErrPartitionRetired: a shrink retired the partition (its queue has
	// fewer partitions now, docs/repartition.md); a subscription that named
	// it in SubscribeOptions.Partitions ends that partition with it.
	ErrPartitionRetired = errors.New("fibril client: partition retired by a repartition")
)

// Error is an error answered by the broker: an ERROR, HELLO_ERR, AUTH_ERR
// or SUBSCRIBE_ERR frame. Op is the request that failed (PUBLISH,
// SUBSCRIBE, ...), not the reply op.
type Error struct {
	Op      wire.Op
	Code    uint16
	Message string
}

func (e *Error) Error() string {
	return "fibril: " + e.Op.String() + ": " + strconv.Itoa(int(e.Code)) + " " + e.Message
}

// Retryable is the advice every SDK gives (docs/protocol.md#answers): 409 and codes ≥ 500 are
// worth retrying, everything else is not. It is advice for the caller; the
// client itself re-sends only what docs/protocol.md#answers allows.
func (e *Error) Retryable() bool { return wire.CodeRetryable(e.Code) }

// Is matches the core sentinel of the same code (core.Sentinel, so that
// errors.Is(err, core.ErrConflict) holds for an Error with code 409),
// ErrOutcomeUnknown for 504 and ErrTLSRequired for 426.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrOutcomeUnknown:
		return e.Code == wire.CodeOutcomeUnknown
	case ErrTLSRequired:
		return e.Code == wire.CodeTLSRequired
	}
	s := core.Sentinel(e.Code)
	return s != nil && s == target
}

func errorFromBody(op wire.Op, body []byte) error {
	var eb wire.ErrorBody
	if err := eb.Decode(body); err != nil {
		return protocolErrorf("%v answered with a malformed error body: %v", op, err)
	}
	return &Error{Op: op, Code: eb.Code, Message: eb.Message}
}

// ProtocolError reports a broker that broke the wire protocol. It matches
// ErrProtocol.
type ProtocolError struct{ Msg string }

func (e *ProtocolError) Error() string { return "fibril client: protocol violation: " + e.Msg }

// Is matches ErrProtocol.
func (e *ProtocolError) Is(target error) bool { return target == ErrProtocol }

func protocolErrorf(format string, args ...any) error {
	return &ProtocolError{Msg: fmt.Sprintf(format, args...)}
}

// OutcomeUnknownError is returned for a request that was written but will
// never be answered on its connection. It matches ErrOutcomeUnknown and the
// cause (a context error, ErrConnectionLost, ErrHeartbeatTimeout, ...).
type OutcomeUnknownError struct {
	Op    wire.Op
	Cause error
}

func (e *OutcomeUnknownError) Error() string {
	return "fibril client: " + e.Op.String() + ": outcome unknown: " + e.Cause.Error()
}

// Unwrap exposes both ErrOutcomeUnknown and the cause to errors.Is.
func (e *OutcomeUnknownError) Unwrap() []error { return []error{ErrOutcomeUnknown, e.Cause} }

// RedirectError is returned when an operation exhausted its redirect
// budget. It matches ErrTooManyRedirects.
type RedirectError struct {
	Op   wire.Op
	Last string // the endpoint the last REDIRECT pointed to ("" when empty)
	N    int
}

func (e *RedirectError) Error() string {
	return fmt.Sprintf("fibril client: %v: too many redirects (%d), last to %q", e.Op, e.N, e.Last)
}

// Is matches ErrTooManyRedirects.
func (e *RedirectError) Is(target error) bool { return target == ErrTooManyRedirects }

// SubscriptionClosedError is what Next returns when a partition
// subscription ended for good: a terminal SUBSCRIPTION_CLOSED reason, a
// reconcile result that dropped it, or a re-subscribe the broker refused.
type SubscriptionClosedError struct {
	Topic     string
	Partition uint32
	Reason    wire.Reason // 0 when Err carries the cause instead
	Message   string
	Err       error // the refusal, for a failed re-subscribe
}

func (e *SubscriptionClosedError) Error() string {
	s := fmt.Sprintf("fibril client: subscription %s/%d closed", e.Topic, e.Partition)
	if e.Reason != 0 {
		s += " (" + e.Reason.String() + ")"
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the refusal of a failed re-subscribe (nil otherwise).
func (e *SubscriptionClosedError) Unwrap() error { return e.Err }

// notWrittenError marks a request whose frame never fully reached the
// socket: the broker cannot have acted on it, so it may be re-sent.
type notWrittenError struct{ err error }

func (e *notWrittenError) Error() string { return "request not written: " + e.err.Error() }
func (e *notWrittenError) Unwrap() error { return e.err }

func isNotWritten(err error) bool {
	var nw *notWrittenError
	return errors.As(err, &nw)
}

// Retryable reports whether err is worth retrying by the caller (docs/protocol.md#answers):
// transport failures, unknown outcomes, exhausted redirects, and broker
// errors with code 409 or ≥ 500. Protocol violations, refusals (4xx) and
// closed clients are not.
func Retryable(err error) bool {
	if err == nil {
		return false
	}
	var be *Error
	if errors.As(err, &be) {
		return be.Retryable()
	}
	switch {
	case errors.Is(err, ErrClosed), errors.Is(err, ErrProtocol), errors.Is(err, ErrTLSRequired),
		errors.Is(err, ErrStaleDelivery), errors.Is(err, ErrAlreadySettled):
		return false
	case errors.Is(err, ErrOutcomeUnknown), errors.Is(err, ErrTooManyRedirects),
		errors.Is(err, ErrConnectionLost), errors.Is(err, ErrHeartbeatTimeout),
		errors.Is(err, context.DeadlineExceeded):
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) || isNotWritten(err)
}

// fatalDialError reports a connect failure that retrying the same endpoint
// cannot fix: the broker refused the handshake (HELLO_ERR, AUTH_ERR, a
// non-retryable ERROR) or broke the protocol.
func fatalDialError(err error) bool {
	var be *Error
	if errors.As(err, &be) {
		return !be.Retryable()
	}
	return errors.Is(err, ErrProtocol) || errors.Is(err, ErrTLSRequired)
}
