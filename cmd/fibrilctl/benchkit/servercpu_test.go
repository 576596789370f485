package benchkit

import (
	"os"
	"testing"
)

func TestParseProcStat(t *testing.T) {
	// A command name with a space and a parenthesis, utime 1234, stime 56.
	line := "4242 (fib ril)) S 1 4242 4242 0 -1 4194560 1000 0 0 0 1234 56 0 0 20 0 12 0 100 1000000 2000 18446744073709551615\n"
	c := parseProcStat([]byte(line))
	if !c.ok || c.user != 12.34 || c.sys != 0.56 {
		t.Fatalf("parsed %+v", c)
	}
	for _, bad := range []string{"", "4242 fibril S 1", "4242 (fibril) S 1 2 3", "4242 (fibril) S 1 4242 4242 0 -1 0 0 0 0 0 x 56 0"} {
		if c := parseProcStat([]byte(bad)); c.ok {
			t.Errorf("%q parsed as %+v", bad, c)
		}
	}
}

func TestServerCPUReadsAProcess(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc here")
	}
	if c := serverCPU(0); c.ok {
		t.Fatalf("pid 0 read as %+v", c)
	}
	a := serverCPU(os.Getpid())
	b := serverCPU(os.Getpid())
	if !a.ok || !b.ok || b.user < a.user || b.sys < a.sys {
		t.Fatalf("own process: %+v then %+v", a, b)
	}
}
