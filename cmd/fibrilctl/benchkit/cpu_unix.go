//go:build unix

package benchkit

import "syscall"

// cpuTimes is the CPU time this process used so far, in seconds.
type cpuTimes struct {
	user, sys float64
	ok        bool
}

// processCPU reads getrusage(RUSAGE_SELF): every goroutine of the bench,
// producers, consumers and the client's readers and writers together.
func processCPU() cpuTimes {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return cpuTimes{}
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return cpuTimes{user: tv(ru.Utime), sys: tv(ru.Stime), ok: true}
}
