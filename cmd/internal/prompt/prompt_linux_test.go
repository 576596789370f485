package prompt

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/fibrilgo/fibril/core/testkit"
)

// On a terminal, `users add` prompts twice and the terminal does not echo
// what is typed, whatever programs the machine has (PATH is empty here, so
// no stty); echo is back on afterwards.
func TestReadNewPasswordOnATerminalDoesNotEcho(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	master, slave := openPTY(t)
	echoed := &lockedBuffer{}
	go func() { // ends when master is closed
		buf := make([]byte, 256)
		for {
			n, err := master.Read(buf)
			echoed.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	prompts := &lockedBuffer{}
	type result struct {
		pw  string
		err error
	}
	done := make(chan result, 1)
	go func() {
		pw, err := NewPassword(context.Background(), slave, prompts)
		done <- result{pw, err}
	}()
	const secret = "hunter2-secret"
	for _, prompt := range []string{"New password: ", "Repeat password: "} {
		testkit.Eventually(t, 10*time.Second, "the prompt "+prompt, func() bool {
			return strings.Contains(prompts.String(), prompt)
		})
		if _, err := master.WriteString(secret + "\n"); err != nil {
			t.Fatal(err)
		}
	}
	var res result
	select {
	case res = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("NewPassword did not return")
	}
	if res.err != nil || res.pw != secret {
		t.Fatalf("got %q, %v", res.pw, res.err)
	}
	// The terminal handles input in order: once this line's echo is seen,
	// any echo of the password would have been seen before it.
	if _, err := master.WriteString("echo-is-back\n"); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "echo restored after the prompt", func() bool {
		return strings.Contains(echoed.String(), "echo-is-back")
	})
	if strings.Contains(echoed.String(), secret) {
		t.Fatalf("the terminal echoed the password: %q", echoed.String())
	}
}

// The first Ctrl-C at the prompt ends the command's context (a second
// one kills the process): echo is back on at once, so a kill does not
// leave the terminal without it, and the command ends with the context's
// error rather than going on.
func TestReadNewPasswordInterruptedRestoresEcho(t *testing.T) {
	master, slave := openPTY(t)
	go func() { // drains the echo; ends when master is closed
		buf := make([]byte, 256)
		for {
			if _, err := master.Read(buf); err != nil {
				return
			}
		}
	}()
	// A second handle on the same terminal, to read its flags.
	probe, err := os.OpenFile(slave.Name(), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	echoOn := func() bool {
		var tio syscall.Termios
		_, _, e := syscall.Syscall(syscall.SYS_IOCTL, probe.Fd(), syscall.TCGETS, uintptr(unsafe.Pointer(&tio)))
		return e == 0 && tio.Lflag&syscall.ECHO != 0
	}
	if !echoOn() {
		t.Fatal("a new terminal without echo")
	}
	prompts := &lockedBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := NewPassword(ctx, slave, prompts)
		done <- err
	}()
	testkit.Eventually(t, 10*time.Second, "the prompt", func() bool { return strings.Contains(prompts.String(), "New password: ") })
	testkit.Eventually(t, 10*time.Second, "echo off at the prompt", func() bool { return !echoOn() })
	cancel()
	testkit.Eventually(t, 10*time.Second, "echo back on after the interrupt", echoOn)
	if _, err := master.WriteString("typed-after\n"); err != nil { // the read ends at a newline
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want the context's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("NewPassword did not return")
	}
	if strings.Contains(prompts.String(), "Repeat password") {
		t.Errorf("prompted again after the interrupt: %q", prompts.String())
	}
}

// openPTY opens a pseudo-terminal pair. The master stays non-blocking
// (registered with the runtime poller), so closing it ends a pending Read.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	rc, err := master.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n uint32
	var ioctlErr error
	if err := rc.Control(func(fd uintptr) {
		var unlock int32
		if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
			ioctlErr = e
			return
		}
		if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
			ioctlErr = e
		}
	}); err != nil || ioctlErr != nil {
		t.Skipf("no pseudo-terminal: %v %v", err, ioctlErr)
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { slave.Close() })
	return master, slave
}

// lockedBuffer is a strings.Builder two goroutines can use at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
