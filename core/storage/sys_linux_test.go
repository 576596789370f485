//go:build linux

package storage_test

import (
	"os"
	"syscall"
	"time"
)

// cpuTimes returns the user and the system CPU time of this process.
func cpuTimes() (user, sys time.Duration) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

func rawDataSync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }
