//go:build !unix

package benchkit

type cpuTimes struct {
	user, sys float64
	ok        bool
}

// processCPU is not available here: the CPU fields stay 0.
func processCPU() cpuTimes { return cpuTimes{} }
