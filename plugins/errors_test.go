package plugins

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
		out := fromStatus(ctx, toStatus(in))
		if !errors.Is(out, sentinel) {
			t.Errorf("%v came back as %v", sentinel, out)
		}
		if out.Error() != in.Error() {
			t.Errorf("message %q came back as %q", in, out)
		}
	}
	// ErrCoordinationUnavailable still reads as the generic 503 sentinel.
	if out := fromStatus(ctx, toStatus(core.ErrCoordinationUnavailable)); !errors.Is(out, core.ErrUnavailable) {
		t.Errorf("unavailable maps to %v", out)
	}
	// An unclassified error stays unclassified.
	if out := fromStatus(ctx, toStatus(errors.New("disk on fire"))); out == nil || errors.Is(out, core.ErrCoordinationUnavailable) {
		t.Errorf("plain error maps to %v", out)
	}
	// A bare status (no reason detail) maps by code.
	if out := fromStatus(ctx, status.Error(codes.Unavailable, "connection refused")); !errors.Is(out, core.ErrCoordinationUnavailable) {
		t.Errorf("UNAVAILABLE maps to %v", out)
	}
	if out := fromStatus(ctx, errors.New("not a status")); !errors.Is(out, core.ErrCoordinationUnavailable) {
		t.Errorf("transport error maps to %v", out)
	}
	if fromStatus(ctx, nil) != nil || toStatus(nil) != nil {
		t.Error("nil is not nil")
	}
}

// The caller's own cancellation or deadline stays the context's error.
func TestErrorMappingContext(t *testing.T) {
	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	if out := fromStatus(cctx, toStatus(context.Canceled)); !errors.Is(out, context.Canceled) {
		t.Errorf("cancelled call maps to %v", out)
	}
	dctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if out := fromStatus(dctx, status.Error(codes.DeadlineExceeded, "plugin saw the deadline first")); !errors.Is(out, context.DeadlineExceeded) {
		t.Errorf("deadline seen first by the plugin maps to %v", out)
	}
	// Without a deadline of the caller, the plugin ending the call means
	// it did not answer.
	if out := fromStatus(context.Background(), status.Error(codes.Canceled, "stopping")); !errors.Is(out, core.ErrCoordinationUnavailable) {
		t.Errorf("plugin-side cancel maps to %v", out)
	}
}
