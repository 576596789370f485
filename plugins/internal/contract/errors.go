package contract

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/plugins/pluginpb"
)

// Errors cross the plugin boundary as gRPC statuses. The code alone is
// ambiguous (a closed backend and a lost lease are both "failed
// precondition"), so each status carries an ErrorReason detail naming the
// core sentinel; the host maps it back, and errors.Is works on the host
// exactly as it would against a built-in backend. The message is the
// plugin's err.Error(), kept verbatim.

const (
	reasonVersionConflict = "version_conflict"
	reasonLeaseLost       = "lease_lost"
	reasonClosed          = "closed"
	reasonUnavailable     = "unavailable"
	reasonBadRequest      = "bad_request"
	reasonPeerRefused     = "peer_refused"
	reasonStreamAborted   = "stream_aborted"
)

// sentinels in matching order: the first that err wraps decides. The
// coordination-specific ones come before ErrUnavailable, which
// ErrCoordinationUnavailable itself wraps.
var sentinels = []struct {
	err    error
	code   codes.Code
	reason string
}{
	{core.ErrVersionConflict, codes.Aborted, reasonVersionConflict},
	{core.ErrLeaseLost, codes.FailedPrecondition, reasonLeaseLost},
	{core.ErrClosed, codes.FailedPrecondition, reasonClosed},
	{core.ErrUnavailable, codes.Unavailable, reasonUnavailable},
	{core.ErrBadRequest, codes.InvalidArgument, reasonBadRequest},
	// The transport's sentinels wrap none of the above.
	{core.ErrPeerRefused, codes.Unavailable, reasonPeerRefused},
	{core.ErrStreamAborted, codes.Aborted, reasonStreamAborted},
}

// ToStatus turns a backend error into the status the plugin answers
// (the SDK's servers).
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err // already a status (e.g. built by the server itself)
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			return reasonStatus(s.code, s.reason, err.Error())
		}
	}
	return status.Error(codes.Unknown, err.Error())
}

func reasonStatus(code codes.Code, reason, msg string) error {
	st := status.New(code, msg)
	if d, err := st.WithDetails(&pluginpb.ErrorReason{Reason: reason}); err == nil {
		st = d
	}
	return st.Err()
}

// FromStatus turns a coordination RPC error into the error the host's
// caller sees. A
// failure of the call itself (the plugin died, the connection broke) is
// ErrCoordinationUnavailable; a cancelled or expired ctx stays the ctx's
// error so callers can tell their own deadline from a backend refusal.
func FromStatus(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return core.Errorf(core.ErrCoordinationUnavailable, "coordination plugin: %v", err)
	}
	msg := st.Message()
	for _, d := range st.Details() {
		r, ok := d.(*pluginpb.ErrorReason)
		if !ok {
			continue
		}
		switch r.GetReason() {
		case reasonVersionConflict:
			return core.Errorf(core.ErrVersionConflict, "%s", msg)
		case reasonLeaseLost:
			return core.Errorf(core.ErrLeaseLost, "%s", msg)
		case reasonClosed:
			return core.Errorf(core.ErrClosed, "%s", msg)
		case reasonUnavailable:
			return core.Errorf(core.ErrCoordinationUnavailable, "%s", msg)
		case reasonBadRequest:
			return core.Errorf(core.ErrBadRequest, "%s", msg)
		case reasonPeerRefused:
			return core.Errorf(core.ErrPeerRefused, "%s", msg)
		case reasonStreamAborted:
			return core.Errorf(core.ErrStreamAborted, "%s", msg)
		}
	}
	switch st.Code() {
	case codes.Canceled, codes.DeadlineExceeded:
		if cerr := ctx.Err(); cerr != nil {
			return fmt.Errorf("coordination plugin: %w", cerr)
		}
		if _, has := ctx.Deadline(); has && st.Code() == codes.DeadlineExceeded {
			// The plugin saw the deadline gRPC propagated from ctx pass a
			// moment before this side did: it is the caller's deadline.
			return fmt.Errorf("coordination plugin: %w", context.DeadlineExceeded)
		}
		// The plugin's side ended the call (it is stopping): the backend
		// did not answer.
		return core.Errorf(core.ErrCoordinationUnavailable, "coordination plugin: %s", msg)
	case codes.Unavailable:
		return core.Errorf(core.ErrCoordinationUnavailable, "coordination plugin unavailable: %s", msg)
	case codes.Aborted:
		return core.Errorf(core.ErrVersionConflict, "%s", msg)
	case codes.InvalidArgument:
		return core.Errorf(core.ErrBadRequest, "%s", msg)
	}
	return fmt.Errorf("coordination plugin: %s", msg)
}

// RefusedError maps the failure of a Dial or OpenStream call: it always
// wraps ErrPeerRefused (no stream exists), and also the context's error
// when the caller's deadline or cancellation ended it.
func RefusedError(ctx context.Context, what string, err error) error {
	e := TransportFromStatus(ctx, err)
	if errors.Is(e, core.ErrPeerRefused) {
		return e
	}
	return fmt.Errorf("%w: %s: %w", core.ErrPeerRefused, what, e)
}

// TransportFromStatus turns a transport RPC error into a host-side error:
// the sentinel the plugin named (ErrorReason), the caller's context error,
// or ErrPeerRefused for a call that failed as such (the plugin died, the
// connection broke).
func TransportFromStatus(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return core.Errorf(core.ErrPeerRefused, "transport plugin: %v", err)
	}
	for _, d := range st.Details() {
		if _, ok := d.(*pluginpb.ErrorReason); ok {
			return FromStatus(ctx, err)
		}
	}
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("transport plugin: %w", cerr)
	}
	return core.Errorf(core.ErrPeerRefused, "transport plugin: %s", st.Message())
}
