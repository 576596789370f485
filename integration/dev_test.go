package integration

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
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

// devRun is a running `fibril dev`: its ports, directory, output lines
// and stderr.
type devRun struct {
	cmd        *exec.Cmd
	cp, ap     int
	dir        string
	lines      chan string
	logs       *lockedBuffer
	exited     chan struct{}
	waitErr    error
	readyLines []string
}

// startDev starts `fibril dev --nodes 3 --private private` (with extra
// dev flags) and waits for "cluster ready".
func startDev(t *testing.T, private int, extra ...string) *devRun {
	cp, ap, rp := freeRun(t, 3), freeRun(t, 3), freeRun(t, 3)
	d := &devRun{cp: cp, ap: ap, dir: t.TempDir(), lines: make(chan string, 16), logs: &lockedBuffer{}, exited: make(chan struct{})}
	args := []string{"dev", "--nodes", "3", "--private", strconv.Itoa(private), "--dir", d.dir,
		"--client-port", strconv.Itoa(cp), "--admin-port", strconv.Itoa(ap), "--raft-port", strconv.Itoa(rp)}
	args = append(args, extra...)
	args = append(args, "--", "--coordination.heartbeat_interval_ms=250", "--coordination.liveness_ttl_ms=1500")
	d.cmd = exec.Command(fibrilBin, args...)
	d.cmd.Env = cleanEnv()
	out, err := d.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	d.cmd.Stderr = d.logs
	dumpOnFailure(t, "fibril dev stderr", d.logs)
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.waitErr = d.cmd.Wait(); close(d.exited) }()
	t.Cleanup(func() {
		select {
		case <-d.exited:
		default:
			_ = d.cmd.Process.Kill()
			<-d.exited
		}
	})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			d.lines <- sc.Text()
		}
		close(d.lines)
	}()
	timeout := time.After(readyTimeout)
	for ready := false; !ready; {
		select {
		case l, ok := <-d.lines:
			if !ok {
				t.Fatalf("fibril dev ended its output early: %q", d.readyLines)
			}
			d.readyLines = append(d.readyLines, l)
			ready = strings.HasPrefix(l, "cluster ready")
		case <-timeout:
			t.Fatalf("fibril dev not ready within %v: %q", readyTimeout, d.readyLines)
		}
	}
	return d
}

// stop sends SIGINT and expects a clean exit.
func (d *devRun) stop(t *testing.T) {
	if err := d.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.exited:
		if d.waitErr != nil {
			t.Fatalf("fibril dev after SIGINT: %v", d.waitErr)
		}
	case <-time.After(exitTimeout):
		t.Fatal("fibril dev did not exit after SIGINT")
	}
}

func testFibrilDev(t *testing.T, private int, extra ...string) {
	d := startDev(t, private, extra...)
	cp, ap, got := d.cp, d.ap, d.readyLines
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
	d.stop(t)
	for i := range 3 {
		if conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(cp+i), time.Second); err == nil {
			conn.Close()
			t.Fatalf("broker %d still listening after fibril dev exited", i+1)
		}
	}
}

// A broker of `fibril dev` killed with SIGKILL: the command says which and
// how, the others keep serving, and `fibril dev restart` starts it again
// with its data.
func TestFibrilDevBrokerDiesAndComesBack(t *testing.T) {
	d := startDev(t, 0)
	pidb, err := os.ReadFile(filepath.Join(d.dir, "node-3", "pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(pidb)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil { // a broker this test's fibril dev started
		t.Fatal(err)
	}
	testkit.Eventually(t, waitTimeout, "fibril dev to report node-3", func() bool {
		return strings.Contains(d.logs.String(), "node-3 exited (signal: killed); the others keep running")
	})
	c := newClient(t, "127.0.0.1:"+strconv.Itoa(d.cp))
	if _, err := c.DeclareQueue(ctxT(t, opTimeout), client.QueueSpec{Topic: "alive", Partitions: 1}); err != nil {
		t.Fatalf("the cluster stopped serving with one broker down: %v", err)
	}
	c.Close()
	out, err := exec.Command(fibrilBin, "dev", "restart", "--dir", d.dir, "node-3").CombinedOutput()
	if err != nil {
		t.Fatalf("fibril dev restart: %v: %s", err, out)
	}
	select {
	case l := <-d.lines:
		if l != "node-3 started again (its data kept)" {
			t.Fatalf("after the restart request: %q", l)
		}
	case <-time.After(waitTimeout):
		t.Fatal("fibril dev did not start node-3 again")
	}
	testkit.Eventually(t, readyTimeout, "node-3 ready again", func() bool {
		resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(d.ap+2) + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	d.stop(t)
}
