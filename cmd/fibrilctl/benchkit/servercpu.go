package benchkit

import (
	"bytes"
	"os"
	"strconv"
)

// clkTck is USER_HZ, the unit of the times in /proc/PID/stat: the kernel
// ABI fixes it at 100 on every architecture Go runs Linux on (it is what
// getconf CLK_TCK prints).
const clkTck = 100

// serverCPU reads the CPU time so far of process pid, every thread
// together, from /proc/PID/stat (--server-pid: the server under test, on
// this machine). ok is false for pid 0, without /proc, or once the
// process is gone.
func serverCPU(pid int) cpuTimes {
	if pid <= 0 {
		return cpuTimes{}
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return cpuTimes{}
	}
	return parseProcStat(b)
}

// parseProcStat takes utime and stime (fields 14 and 15, in clock ticks)
// of a /proc/PID/stat line. Field 2, the command name, is in parentheses
// and may hold spaces and parentheses: the fields are counted from the
// last ')', after which field 3 starts.
func parseProcStat(b []byte) cpuTimes {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return cpuTimes{}
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 13 {
		return cpuTimes{}
	}
	u, err1 := strconv.ParseUint(string(f[11]), 10, 64)
	s, err2 := strconv.ParseUint(string(f[12]), 10, 64)
	if err1 != nil || err2 != nil {
		return cpuTimes{}
	}
	return cpuTimes{user: float64(u) / clkTck, sys: float64(s) / clkTck, ok: true}
}
