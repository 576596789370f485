package core

import (
	"errors"
	"fmt"
	"testing"

	"github.com/fibrilgo/fibril/core/wire"
)

func TestCodeMapsEverySentinel(t *testing.T) {
	cases := map[error]uint16{
		ErrBadRequest:                        400,
		ErrUnauthorized:                      401,
		ErrForbidden:                         403,
		ErrNotFound:                          404,
		ErrConflict:                          409,
		ErrTooLarge:                          413,
		ErrInternal:                          500,
		ErrUnavailable:                       503,
		ErrOutcomeUnknown:                    504,
		errors.New("disk on fire"):           500,
		fmt.Errorf("ctx: %w", ErrConflict):   409,
		Errorf(ErrNotFound, "queue %q", "q"): 404,
		fmt.Errorf("a: %w", Errorf(ErrTooLarge, "big")): 413,
	}
	for err, want := range cases {
		if got := Code(err); got != want {
			t.Errorf("Code(%v) = %d, want %d", err, got, want)
		}
	}
	for _, c := range codes { // Sentinel is Code's inverse
		if got := Sentinel(c.code); got != c.err {
			t.Errorf("Sentinel(%d) = %v, want %v", c.code, got, c.err)
		}
	}
	if Sentinel(418) != nil {
		t.Error("Sentinel(418) is not nil")
	}
	if !wire.CodeRetryable(Code(ErrUnavailable)) || wire.CodeRetryable(Code(ErrNotFound)) {
		t.Error("retry classification of 503/404 is wrong")
	}
}

func TestErrorfKeepsMessageClean(t *testing.T) {
	err := Errorf(ErrNotFound, "queue %q has no partition %d", "orders", 7)
	if err.Error() != `queue "orders" has no partition 7` {
		t.Fatalf("message = %q", err.Error())
	}
	if !errors.Is(err, ErrNotFound) {
		t.Fatal("errors.Is lost the sentinel")
	}
}
