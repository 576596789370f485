// Package sdnotify speaks systemd's service notification protocol, so that
// a broker run as a Type=notify unit can say when it is ready to serve
// (READY=1), when it begins to stop (STOPPING=1) and what it is doing
// (STATUS=…).
//
// Why a package of our own: the protocol is one datagram of
// newline-separated VARIABLE=value lines sent to the unix datagram socket
// that systemd names in NOTIFY_SOCKET. That is a few lines over the net
// package, not worth libsystemd (cgo) or a third-party module. Outside
// systemd NOTIFY_SOCKET is unset and every call does nothing, so callers
// need no "am I under systemd?" check of their own.
package sdnotify

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"time"
)

// EnvSocket is the environment variable through which systemd passes the
// notify socket's address to the service.
const EnvSocket = "NOTIFY_SOCKET"

// writeTimeout bounds one send: systemd reads its socket promptly, and a
// broker must never hang on a notification.
const writeTimeout = 5 * time.Second

// Notifier sends notifications to one notify socket.
type Notifier struct {
	// Socket is the socket's address as NOTIFY_SOCKET spells it: an
	// absolute file system path, or an abstract socket name starting
	// with '@' (Linux only). Empty means no supervisor listens: every
	// send is a no-op.
	Socket string
}

// FromEnv returns the Notifier for this process's NOTIFY_SOCKET.
func FromEnv() Notifier { return Notifier{Socket: os.Getenv(EnvSocket)} }

// FromEnviron returns the Notifier for the NOTIFY_SOCKET of environ, a
// list of KEY=value entries as os.Environ returns it (the first entry of a
// name wins, as with os.Getenv). It lets a caller that is handed its
// environment, rather than reading the process's, stay hermetic in tests.
func FromEnviron(environ []string) Notifier {
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, EnvSocket+"="); ok {
			return Notifier{Socket: v}
		}
	}
	return Notifier{}
}

// Notify sends state, one or more newline-separated VARIABLE=value lines,
// as a single datagram. sent reports whether it went out: it is false with
// a nil error when Socket is empty, and false with an error when the
// socket cannot be reached (an error a caller should log, not die of: the
// service works the same without its supervisor hearing about it).
func (n Notifier) Notify(state string) (sent bool, err error) {
	if n.Socket == "" {
		return false, nil
	}
	addr, err := n.addr()
	if err != nil {
		return false, err
	}
	conn, err := net.DialUnix("unixgram", nil, addr)
	if err != nil {
		return false, fmt.Errorf("notify socket: %w", err)
	}
	defer conn.Close()
	if err := conn.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil {
		return false, fmt.Errorf("notify socket: %w", err)
	}
	if _, err := conn.Write([]byte(state)); err != nil {
		return false, fmt.Errorf("notify socket: %w", err)
	}
	return true, nil
}

// addr checks Socket and turns it into a unix datagram address. The two
// forms systemd hands out are accepted; anything else (a relative path,
// or the vsock: addresses of virtual machines) is refused by name.
func (n Notifier) addr() (*net.UnixAddr, error) {
	switch {
	case strings.HasPrefix(n.Socket, "/"):
	case strings.HasPrefix(n.Socket, "@") && len(n.Socket) > 1:
		// An abstract socket: on Linux the net package sends a leading
		// '@' as the NUL byte that marks the abstract namespace. Other
		// systems have no such namespace and would take it for a
		// relative path.
		if runtime.GOOS != "linux" {
			return nil, fmt.Errorf("%s=%q: abstract sockets exist on Linux only", EnvSocket, n.Socket)
		}
	default:
		return nil, fmt.Errorf("%s=%q: not an absolute path or an @abstract socket name", EnvSocket, n.Socket)
	}
	return &net.UnixAddr{Name: n.Socket, Net: "unixgram"}, nil
}

// Ready tells systemd that start-up is complete: a Type=notify unit
// counts as started from here on.
func (n Notifier) Ready() (bool, error) { return n.Notify("READY=1") }

// Stopping tells systemd that an orderly shutdown has begun.
func (n Notifier) Stopping() (bool, error) { return n.Notify("STOPPING=1") }

// Status sets the free-form status line `systemctl status` shows. Line
// breaks in msg become spaces: the protocol reads one variable per line.
func (n Notifier) Status(msg string) (bool, error) {
	return n.Notify("STATUS=" + strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(msg))
}

// Notify sends state to this process's NOTIFY_SOCKET (see Notifier.Notify).
func Notify(state string) (sent bool, err error) { return FromEnv().Notify(state) }

// Ready sends READY=1 to this process's NOTIFY_SOCKET.
func Ready() (bool, error) { return FromEnv().Ready() }

// Stopping sends STOPPING=1 to this process's NOTIFY_SOCKET.
func Stopping() (bool, error) { return FromEnv().Stopping() }

// Status sends STATUS=msg to this process's NOTIFY_SOCKET.
func Status(msg string) (bool, error) { return FromEnv().Status(msg) }
