package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ctl runs fibrilctl in-process against the test broker.
func ctl(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return ctlCtx(ctx, stdin, args...)
}

func mustOK(t *testing.T, r result, what string) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("%s: exit %d\nstdout: %s\nstderr: %s", what, r.code, r.stdout, r.stderr)
	}
}

var readyRE = regexp.MustCompile(`msg="broker ready".* broker=(\S+) admin=(\S+)`)

// startBroker runs the broker and waits for its "broker ready" log line.
// The returned function stops it by its PID (SIGTERM) and waits.
func startBroker(bin, dataDir string) (func() error, error) {
	cmd := exec.Command(bin, "--server.data_dir="+dataDir,
		"--broker.listener.bind=127.0.0.1:0", "--admin.listener.bind=127.0.0.1:0")
	cmd.Env = os.Environ()
	out, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	var logBuf bytes.Buffer
	ready := make(chan [2]string, 1)
	logDone := make(chan struct{})
	go func() {
		defer close(logDone)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			logBuf.WriteString(line + "\n")
			if m := readyRE.FindStringSubmatch(line); m != nil {
				select {
				case ready <- [2]string{m[1], m[2]}:
				default:
				}
			}
		}
		io.Copy(io.Discard, out)
	}()
	stop := func() error {
		if err := syscall.Kill(cmd.Process.Pid, syscall.SIGTERM); err != nil {
			return err
		}
		waited := make(chan error, 1)
		go func() { <-logDone; waited <- cmd.Wait() }()
		select {
		case err := <-waited:
			return err
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
			return fmt.Errorf("broker did not stop within 30s")
		}
	}
	select {
	case a := <-ready:
		brokerAddr, adminAddr, brokerPID = a[0], a[1], cmd.Process.Pid
		return stop, nil
	case <-logDone:
		cmd.Wait()
		return nil, fmt.Errorf("broker exited before ready:\n%s", logBuf.String())
	case <-time.After(30 * time.Second):
		stop()
		return nil, fmt.Errorf("broker not ready within 30s")
	}
}

type result struct {
	stdout, stderr string
	code           int
}

// ctlCtx is ctl with the caller's context (cancelling it is what SIGINT
// does to the real command).
func ctlCtx(ctx context.Context, stdin string, args ...string) result {
	var out, errb bytes.Buffer
	e := &env{stdin: strings.NewReader(stdin), stdout: &out, stderr: &errb, getenv: func(k string) string {
		switch k {
		case "FIBRIL_ADDR":
			return brokerAddr
		case "FIBRIL_ADMIN_ADDR":
			return adminAddr
		}
		return ""
	}}
	code := run(ctx, args, e)
	return result{out.String(), errb.String(), code}
}
