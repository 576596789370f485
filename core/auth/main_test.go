package auth

import (
	"os"
	"sync/atomic"
	"testing"
)

// testParams make a hash cost well under a millisecond. Every behaviour
// under test is independent of the cost; BenchmarkVerify measures the
// production parameters.
var testParams = params{memoryKiB: 64, passes: 1, lanes: 1}

func TestMain(m *testing.M) {
	defaultParams = testParams
	os.Exit(m.Run())
}

// countVerifications installs verifyHook for the test's duration and
// returns the counter it increments.
func countVerifications(t *testing.T) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	verifyHook = func() { n.Add(1) }
	t.Cleanup(func() { verifyHook = nil })
	return &n
}
