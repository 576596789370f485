package integration

// The packet wire: a lab (harness_netns_test.go) whose hosts are joined
// through the test process instead of a bridge, for the faults a route
// cannot make: added delay, random loss, and the loss of one direction of
// one kind of connection. Every host's namespace has a TUN device holding
// its address, and so has the root namespace, where the test process and
// its clients are (198.18.n.1). The test process reads each IP packet a
// host sends, looks up the destination host, applies the rule of that
// direction (drop it, or hold it for the delay) and writes it into the
// destination's TUN device. Each direction keeps its packets in order, as
// a real link does.
//
// tc netem would do this in the kernel, but this machine's kernel is built
// without it (CONFIG_NET_SCH_NETEM is off, and there is no sch_fq for
// timestamp-based delay), while TUN is always there; a wire the test owns
// also counts exactly what it dropped.

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// wireRule impairs the packets of one direction (from one host to another).
type wireRule struct {
	Delay time.Duration // held this long before delivery
	Loss  float64       // probability that a packet is dropped, 0…1
	// SrcPort, when set, limits the rule to TCP and UDP packets sent from
	// this port (a listener's answers); other packets pass unimpaired.
	SrcPort uint16
}

// wireDir is one direction between two hosts.
type wireDir struct{ from, to netip.Addr }

type packetWire struct {
	t     *testing.T
	ports map[netip.Addr]*wirePort // by host address; fixed after set-up
	done  chan struct{}
	wg    sync.WaitGroup

	mu    sync.Mutex
	rules map[wireDir]wireRule
	lines map[wireDir]chan wirePacket
	rng   *rand.Rand // loss decisions, seeded per lab (logged)

	passed, dropped, overflow atomic.Int64
}

type wirePort struct {
	addr netip.Addr
	name string
	f    *os.File
}

type wirePacket struct {
	due time.Time
	b   []byte
}

// wireLineDepth bounds the packets one direction holds (its queue): at
// 200 ms of delay and this machine's loopback rates it is never reached;
// a full line drops, as a router's queue would, and counts it.
const wireLineDepth = 1 << 16

// newWireLab builds a lab of n hosts joined by a packet wire.
func newWireLab(t *testing.T, n int) *netLab {
	t.Helper()
	l := newLab(t, n)
	seed := rand.Uint64()
	w := &packetWire{
		t:     t,
		ports: map[netip.Addr]*wirePort{},
		done:  make(chan struct{}),
		rules: map[wireDir]wireRule{},
		lines: map[wireDir]chan wirePacket{},
		rng:   rand.New(rand.NewPCG(seed, seed>>1|1)),
	}
	l.wire = w
	// Runs before the namespaces go (cleanups run last first) and after
	// the brokers were killed.
	t.Cleanup(w.close)
	root, err := openTun("", "ft"+l.id+"r")
	if err != nil {
		netnsUnavailable(t, "TUN device: %v", err)
	}
	w.ports[l.gw] = &wirePort{addr: l.gw, name: "ft" + l.id + "r", f: root}
	l.must(false, "link", "set", "dev", "ft"+l.id+"r", "alias", l.tag)
	l.must(false, "addr", "add", netip.PrefixFrom(l.gw, 24).String(), "dev", "ft"+l.id+"r")
	l.must(false, "link", "set", "dev", "ft"+l.id+"r", "up")
	for _, h := range l.hosts {
		name := fmt.Sprintf("ft%s%d", l.id, h.i)
		f, err := openTun(h.ns, name)
		if err != nil {
			t.Fatalf("TUN device in %s: %v", h.ns, err)
		}
		w.ports[h.addr] = &wirePort{addr: h.addr, name: name, f: f}
		l.must(false, "-n", h.ns, "addr", "add", netip.PrefixFrom(h.addr, 24).String(), "dev", name)
		l.must(false, "-n", h.ns, "link", "set", "dev", name, "up")
	}
	for _, p := range w.ports {
		w.wg.Add(1)
		go w.read(p)
	}
	t.Logf("lab %s: packet wire, root %s, hosts %v, loss seed %d", l.id, l.gw, l.addrs(), seed)
	return l
}

// inNetns runs f on a thread that has entered the network namespace ns
// ("" for the test process's own), so that what f opens (a TUN device, a
// socket) lives there whichever thread uses it later.
func inNetns(ns string, f func() error) error {
	ch := make(chan error, 1)
	go func() {
		// A thread that cannot return to its namespace stays locked: the
		// runtime ends it with this goroutine.
		runtime.LockOSThread()
		if ns == "" {
			defer runtime.UnlockOSThread()
			ch <- f()
			return
		}
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			ch <- err
			return
		}
		defer self.Close()
		target, err := os.Open("/var/run/netns/" + ns)
		if err != nil {
			ch <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- fmt.Errorf("setns %s: %w", ns, err)
			return
		}
		ferr := f()
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err == nil {
			runtime.UnlockOSThread()
		}
		ch <- ferr
	}()
	return <-ch
}

// openTun opens a new TUN device named name (IP packets, no header) in the
// network namespace ns ("" for the test process's own). The device lives
// as long as the file is open.
func openTun(ns, name string) (*os.File, error) {
	var f *os.File
	err := inNetns(ns, func() error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			return fmt.Errorf("open /dev/net/tun: %w", err)
		}
		ifr, err := unix.NewIfreq(name)
		if err != nil {
			unix.Close(fd)
			return err
		}
		ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			unix.Close(fd)
			return fmt.Errorf("TUNSETIFF %s: %w", name, err)
		}
		// Non-blocking: the runtime's poller serves reads, and closing the
		// file ends a read in progress.
		f = os.NewFile(uintptr(fd), name)
		return nil
	})
	return f, err
}

// set replaces the rule of the direction from → to (a zero rule: none).
func (w *packetWire) set(from, to netip.Addr, r wireRule) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r == (wireRule{}) {
		delete(w.rules, wireDir{from, to})
		return
	}
	w.rules[wireDir{from, to}] = r
}

// clear removes every rule.
func (w *packetWire) clear() {
	w.mu.Lock()
	defer w.mu.Unlock()
	clear(w.rules)
}

// read forwards the packets host p sends.
func (w *packetWire) read(p *wirePort) {
	defer w.wg.Done()
	buf := make([]byte, 1<<16)
	for {
		n, err := p.f.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				select {
				case <-w.done:
				default:
					w.t.Errorf("packet wire: reading %s: %v", p.name, err)
				}
			}
			return
		}
		pkt := buf[:n]
		// IPv4 only (the lab has no IPv6 addresses; a TUN device's own
		// router solicitations end here).
		if n < 20 || pkt[0]>>4 != 4 {
			continue
		}
		dst := netip.AddrFrom4([4]byte(pkt[16:20]))
		if _, ok := w.ports[dst]; !ok {
			continue
		}
		now := time.Now()
		d := wireDir{p.addr, dst}
		w.mu.Lock()
		r, ruled := w.rules[d]
		if ruled && r.SrcPort != 0 && srcPort(pkt) != r.SrcPort {
			r = wireRule{}
		}
		if r.Loss > 0 && w.rng.Float64() < r.Loss {
			w.mu.Unlock()
			w.dropped.Add(1)
			continue
		}
		line := w.lines[d]
		if line == nil {
			line = make(chan wirePacket, wireLineDepth)
			w.lines[d] = line
			w.wg.Add(1)
			go w.deliver(w.ports[dst], line)
		}
		w.mu.Unlock()
		select {
		case line <- wirePacket{due: now.Add(r.Delay), b: append([]byte(nil), pkt...)}:
		default:
			w.overflow.Add(1)
		}
	}
}

// deliver writes one direction's packets into the destination, each at
// its due time and in the order they were sent.
func (w *packetWire) deliver(to *wirePort, line <-chan wirePacket) {
	defer w.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var p wirePacket
		select {
		case p = <-line:
		case <-w.done:
			return
		}
		if wait := time.Until(p.due); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-w.done:
				return
			}
		}
		if _, err := to.f.Write(p.b); err != nil {
			if errors.Is(err, os.ErrClosed) {
				return
			}
			// A full device queue drops the packet, as a link would.
			w.overflow.Add(1)
			continue
		}
		w.passed.Add(1)
	}
}

// srcPort is the TCP or UDP source port of an IPv4 packet (0 for other
// protocols and fragments after the first).
func srcPort(pkt []byte) uint16 {
	ihl := int(pkt[0]&0x0f) * 4
	proto := pkt[9]
	fragOff := (uint16(pkt[6])&0x1f)<<8 | uint16(pkt[7])
	if (proto != unix.IPPROTO_TCP && proto != unix.IPPROTO_UDP) || fragOff != 0 || len(pkt) < ihl+4 {
		return 0
	}
	return uint16(pkt[ihl])<<8 | uint16(pkt[ihl+1])
}

// close stops the wire and removes its devices (a TUN device goes with
// its file).
func (w *packetWire) close() {
	close(w.done)
	for _, p := range w.ports {
		_ = p.f.Close()
	}
	w.wg.Wait()
	w.t.Logf("packet wire: %d packets passed, %d dropped by rules, %d dropped by full queues",
		w.passed.Load(), w.dropped.Load(), w.overflow.Load())
}

// listenIn opens a TCP listener inside namespace ns.
func listenIn(ns, addr string) (net.Listener, error) {
	var l net.Listener
	err := inNetns(ns, func() (err error) {
		l, err = net.Listen("tcp4", addr)
		return err
	})
	return l, err
}

// The wire itself: a round trip through a delayed direction takes at
// least the delay, a direction at 100% loss carries nothing, and a rule
// limited to a source port spares the rest.
func TestPacketWire(t *testing.T) {
	lab := newWireLab(t, 2)
	h := lab.hosts[0]
	echo := func(port int) string {
		l, err := listenIn(h.ns, netip.AddrPortFrom(h.addr, uint16(port)).String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for i := 0; i < 100; i++ {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
			}
		}()
		return l.Addr().String()
	}
	a, b := echo(7001), echo(7002)
	// roundTrip dials addr and echoes one line, bounded by within.
	roundTrip := func(addr string, within time.Duration) (time.Duration, error) {
		start := time.Now()
		c, err := net.DialTimeout("tcp4", addr, within)
		if err != nil {
			return 0, err
		}
		defer c.Close()
		_ = c.SetDeadline(start.Add(within))
		if _, err := c.Write([]byte("ping\n")); err != nil {
			return 0, err
		}
		if _, err := io.ReadFull(c, make([]byte, 5)); err != nil {
			return 0, err
		}
		return time.Since(start), nil
	}
	if _, err := roundTrip(a, 5*time.Second); err != nil {
		t.Fatalf("no round trip on an unimpaired wire: %v", err)
	}
	// 150 ms towards the host: the handshake and the echo each cross it.
	lab.wire.set(lab.gw, h.addr, wireRule{Delay: 150 * time.Millisecond})
	if d, err := roundTrip(a, 5*time.Second); err != nil || d < 300*time.Millisecond {
		t.Fatalf("with 150 ms towards the host: round trip %v, %v; want at least 300 ms", d, err)
	}
	// The host's answers from port 7001 lost: 7001 is unreachable, 7002 is not.
	lab.wire.clear()
	lab.wire.set(h.addr, lab.gw, wireRule{Loss: 1, SrcPort: 7001})
	if _, err := roundTrip(a, time.Second); err == nil {
		t.Fatal("a round trip to port 7001 while its answers are lost")
	}
	if _, err := roundTrip(b, 5*time.Second); err != nil {
		t.Fatalf("port 7002 unreachable while only 7001's answers are lost: %v", err)
	}
	lab.wire.clear()
	if _, err := roundTrip(a, 5*time.Second); err != nil {
		t.Fatalf("no round trip after the rules were cleared: %v", err)
	}
	if lab.wire.dropped.Load() == 0 {
		t.Error("the wire counted no dropped packet")
	}
}
