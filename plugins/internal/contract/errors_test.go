package contract

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fibrilgo/fibril/core"
)

// Every sentinel survives the trip through a gRPC status, message and all.
func TestErrorMapping(t *testing.T) {
	ctx := context.Background()
	for _, sentinel := range []error{core.ErrVersionConflict, core.ErrLeaseLost, core.ErrClosed, core.ErrCoordinationUnavailable, core.ErrBadRequest} {
		in := fmt.Errorf("backend says: %w", sentinel)
		out := FromStatus(ctx, ToStatus(in))
		if !errors.Is(out, sentinel) {
			t.Errorf("%v came back as %v", sentinel, out)
		}
		if out.Error() != in.Error() {
			t.Errorf("message %q came back as %q", in, out)
		}
	}
	// ErrCoordinationUnavailable still reads as the generic 503 sentinel.
	if out := FromStatus(ctx, ToStatus(core.ErrCoordinationUnavailable)); !errors.Is(out, core.ErrUnavailable) {
		t.Errorf("unavailable maps to %v", out)
	}
	// An unclassified error stays unclassified.
	if out := FromStatus(ctx, ToStatus(errors.New("disk on fire"))); out == nil || errors.Is(out, core.ErrCoordinationUnavailable) {
		t.Errorf("plain error maps to %v", out)
	}
	// A bare status (no reason detail) maps by code.
	if out := FromStatus(ctx, status.Error(codes.Unavailable, "connection refused")); !errors.Is(out, core.ErrCoordinationUnavailable) {
		t.Errorf("UNAVAILABLE maps to %v", out)
	}
	if out := FromStatus(ctx, errors.New("not a status")); !errors.Is(out, core.ErrCoordinationUnavailable) {
		t.Errorf("transport error maps to %v", out)
	}
	if FromStatus(ctx, nil) != nil || ToStatus(nil) != nil {
		t.Error("nil is not nil")
	}
}

// The caller's own cancellation or deadline stays the context's error.
func TestErrorMappingContext(t *testing.T) {
	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	if out := FromStatus(cctx, ToStatus(context.Canceled)); !errors.Is(out, context.Canceled) {
		t.Errorf("cancelled call maps to %v", out)
	}
	dctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if out := FromStatus(dctx, status.Error(codes.DeadlineExceeded, "plugin saw the deadline first")); !errors.Is(out, context.DeadlineExceeded) {
		t.Errorf("deadline seen first by the plugin maps to %v", out)
	}
	// Without a deadline of the caller, the plugin ending the call means
	// it did not answer.
	if out := FromStatus(context.Background(), status.Error(codes.Canceled, "stopping")); !errors.Is(out, core.ErrCoordinationUnavailable) {
		t.Errorf("plugin-side cancel maps to %v", out)
	}
}

func TestTransportErrorMapping(t *testing.T) {
	ctx := context.Background()
	for _, sentinel := range []error{core.ErrPeerRefused, core.ErrStreamAborted, core.ErrClosed} {
		out := TransportFromStatus(ctx, ToStatus(core.Errorf(sentinel, "plugin says")))
		if !errors.Is(out, sentinel) || out.Error() != "plugin says" {
			t.Errorf("%v came back as %v", sentinel, out)
		}
	}
	if out := TransportFromStatus(ctx, errors.New("conn broke")); !errors.Is(out, core.ErrPeerRefused) {
		t.Errorf("a broken call maps to %v", out)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if out := RefusedError(cctx, "open", ToStatus(context.Canceled)); !errors.Is(out, context.Canceled) || !errors.Is(out, core.ErrPeerRefused) {
		t.Errorf("cancelled open maps to %v", out)
	}
}
