package integration

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/testkit"
)

// freeRun returns a base port such that base..base+n-1 are free on
// 127.0.0.1 right now (bounded attempts).
func freeRun(t *testing.T, n int) int {
	t.Helper()
	for range 50 {
		base := freePort(t)
		if base+n > 65535 {
			continue
		}
		ok := true
		for i := 1; i < n && ok; i++ {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(base+i))
			if err != nil {
				ok = false
				break
			}
			l.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatal("no run of free ports")
	return 0
}

// `fibril dev --nodes 3`: three brokers on loopback, one line
// per broker with node id, role, client address and admin URL; the cluster
// serves; Ctrl-C (SIGINT) stops every broker and the command exits 0. With
// `--private 2` the last two are private and a client of the
// first reaches every partition through it.
func TestFibrilDev(t *testing.T) {
	for _, private := range []int{0, 2} {
		t.Run("private="+strconv.Itoa(private), func(t *testing.T) { testFibrilDev(t, private) })
	}
}

func testFibrilDev(t *testing.T, private int) {
	cp, ap, rp := freeRun(t, 3), freeRun(t, 3), freeRun(t, 3)
	cmd := exec.Command(fibrilBin, "dev", "--nodes", "3", "--private", strconv.Itoa(private), "--dir", t.TempDir(),
		"--client-port", strconv.Itoa(cp), "--admin-port", strconv.Itoa(ap), "--raft-port", strconv.Itoa(rp),
		"--", "--coordination.heartbeat_interval_ms=250", "--coordination.liveness_ttl_ms=1500")
	cmd.Env = cleanEnv()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuffer{}
	cmd.Stderr = logs
	dumpOnFailure(t, "fibril dev stderr", logs)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var got []string
	timeout := time.After(readyTimeout)
	for ready := false; !ready; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("fibril dev ended its output early: %q", got)
			}
			got = append(got, l)
			ready = strings.HasPrefix(l, "cluster ready")
		case <-timeout:
			t.Fatalf("fibril dev not ready within %v: %q", readyTimeout, got)
		}
	}
	for i := range 3 {
		role, note := "public", ""
		if i >= 3-private {
			role, note = "private", "  (peers only: clients reach it through a public broker)"
		}
		want := "node-" + strconv.Itoa(i+1) + "  " + role + "  client 127.0.0.1:" + strconv.Itoa(cp+i) +
			"  admin http://127.0.0.1:" + strconv.Itoa(ap+i) + note
		if len(got) <= i || got[i] != want {
			t.Fatalf("line %d = %q, want %q (all: %q)", i, got, want, got)
		}
	}
	entry := "127.0.0.1:" + strconv.Itoa(cp+2)
	if private > 0 {
		entry = "127.0.0.1:" + strconv.Itoa(cp) // the public one
	}
	c := newClient(t, entry, func(o *client.Options) {
		inner := o.Dial
		o.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			for i := 3 - private; i < 3; i++ {
				if addr == "127.0.0.1:"+strconv.Itoa(cp+i) {
					t.Errorf("the client dialled the private broker %s", addr)
					return nil, errors.New("private broker")
				}
			}
			return inner(ctx, network, addr)
		}
	})
	if _, err := c.DeclareQueue(ctxT(t, opTimeout), client.QueueSpec{Topic: "dev", Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, waitTimeout, "the queue placed", func() bool {
		topo, err := c.Topology(ctxT(t, opTimeout), "dev")
		if err != nil {
			return false
		}
		for _, p := range topo.Queues {
			if len(p.Owners) == 0 {
				return false
			}
		}
		return len(topo.Queues) == 3
	})
	for p := range uint32(3) {
		publish(t, c, "dev", client.Message{Partition: u32(p), Payload: []byte("x")})
	}
	c.Close()
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		if waitErr != nil {
			t.Fatalf("fibril dev after SIGINT: %v", waitErr)
		}
	case <-time.After(exitTimeout):
		t.Fatal("fibril dev did not exit after SIGINT")
	}
	for i := range 3 {
		if conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(cp+i), time.Second); err == nil {
			conn.Close()
			t.Fatalf("broker %d still listening after fibril dev exited", i+1)
		}
	}
}
