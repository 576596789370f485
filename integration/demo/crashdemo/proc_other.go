//go:build !linux

package crashdemo

import "os/exec"

// dieWithParent is a no-op where the kernel cannot tie a child's life to
// its parent's; Run stops every broker it started before it returns.
func dieWithParent(*exec.Cmd) {}
