package testkit

import (
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// handedOut holds every port FreePort returned in this process: a port is
// only reserved until the caller binds it, and the kernel may offer the
// same free port again meanwhile.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// lowPortBase is the lowest port FreePort picks below the ephemeral range.
const lowPortBase = 20000

// FreePort returns a loopback port that nothing listens on (TCP or UDP)
// right now and that it has not returned before in this process, for a
// test that must put a port in a child process's configuration. It picks
// from below the kernel's ephemeral range (net.ipv4.ip_local_port_range)
// when there is room: a port from that range may be taken by any
// process's outgoing connection or port-0 listener between this check and
// the child's bind — with every test package running at once, CI saw
// "bind: address already in use" — while ports below it are only handed
// out by FreePort.
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := PickPort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// PickPort is FreePort for a program that is not a test (the crash demo):
// the same choice, with an error instead of a failed test.
func PickPort() (int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	if lo := ephemeralLow(); lo > lowPortBase+1000 {
		for range 1000 {
			port := lowPortBase + rand.IntN(lo-lowPortBase)
			if !handedOut.ports[port] && portFree(port) {
				handedOut.ports[port] = true
				return port, nil
			}
		}
	}
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port, nil
		}
	}
	return 0, errors.New("FreePort: no port that was not handed out before in 100 tries")
}

// ephemeralLow is the first port of the kernel's ephemeral range (0 when
// it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(f[0])
	return n
}

// portFree reports whether port can be bound on loopback for TCP and UDP
// (QUIC peers and Consul's gossip use UDP on a port number too).
func portFree(port int) bool {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	l.Close()
	u, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	u.Close()
	return true
}
