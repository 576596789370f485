package crashdemo

import (
	"os/exec"
	"syscall"
)

// dieWithParent asks the kernel to SIGKILL the broker when the demo's
// process ends, however it ends: a demo that is interrupted or killed
// leaves no broker running.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
