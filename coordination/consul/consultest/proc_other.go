//go:build !linux

package consultest

import "os/exec"

// dieWithParent is a no-op where the kernel cannot tie a child's life to
// its parent's; Stop (run by t.Cleanup) ends the agent.
func dieWithParent(*exec.Cmd) {}
