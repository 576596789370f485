//go:build unix

package main

import "syscall"

// processCPU returns the user and system CPU seconds this process has used
// (getrusage RUSAGE_SELF: producers, consumers and the NATS clients'
// goroutines together); ok is false when it cannot be read.
func processCPU() (user, sys float64, ok bool) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0, 0, false
	}
	sec := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)*1e-6 }
	return sec(ru.Utime), sec(ru.Stime), true
}
