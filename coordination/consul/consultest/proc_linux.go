package consultest

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the agent die with the test process, so an
// interrupted test run leaves no agent behind.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
