// Command rttfloor measures the machine's floor for the single-message
// round trip (docs/performance.md, "Tail latency"): what the least code
// that does the broker's I/O for one confirmed, delivered and
// acknowledged message costs on this machine, so that the broker's own
// round trip (`fibrilctl bench --mode rtt`) can be read against it rather
// than against the bare fsync alone.
//
// It runs as two processes, as a broker and its client do: the parent (the
// client) starts itself again as the server ("rttfloor serve") and talks to
// it over loopback TCP on two connections, a producer and a consumer. Per
// message, one at a time:
//
//   - the client writes the message (size bytes) on the producer
//     connection;
//   - the server writes it into a log file inside the file's length (the
//     file is extended 256 KiB at a time with a hole, as the broker's
//     segments are), writes it to the consumer connection (delivered once
//     written, before its fsync, as the broker does), fdatasyncs the log
//     and writes an 8-byte confirm on the producer connection;
//   - the client's consumer goroutine reads the delivery and writes an
//     8-byte ack at once; the server appends 13 bytes per ack to a second
//     file (the broker's settlement journal, not fsynced per ack).
//
// The round trip is counted as the bench counts it: from the send to the
// later of the confirm's arrival and the ack's write. Every step is done
// inline by the goroutine that reads the frame, so the floor has no
// goroutine hand-off the broker might have; what is left is the kernel's
// work (two loopback round trips, the write and the fdatasync) and the
// wake-ups of two processes on this machine's cores. With --deliver=false
// there is no consumer: a confirmed publish one at a time. With
// --deliver-after-sync the delivery is written after the fdatasync instead
// of before it (the broker does not do this: it is there to measure what
// the delivery overlapping the fsync costs the confirm). With --busy D a
// goroutine of the server's keeps a core busy for D while each fdatasync
// runs (no syscall, only CPU), which measures what work elsewhere on the
// machine during the fsync costs the confirm (on this repository's
// two-vCPU test VM, about as much as the work itself:
// docs/performance.md).
//
// With --broker ADDR the same measure runs against a Fibril broker
// instead, with the least client there is (broker.go): beside the floor
// and `fibrilctl bench --mode rtt` (the Go client), it tells the broker's
// part of the round trip from the client library's. --auto-ack subscribes
// with auto-ack, so that the consumer sends no ACK and the broker settles
// each message as it writes the delivery.
//
//	rttfloor --dir DIR [--n 20000] [--duration 10s] [--size 1024] [--deliver=true] [--deliver-after-sync] [--busy 0] [--json]
//	rttfloor --broker HOST:PORT [--user fibril] [--password fibril] [--n …] [--duration …] [--size …] [--deliver=…] [--auto-ack] [--json]
//
// DIR should be the broker's data directory's file system. The server's
// own fdatasync latency is reported beside the round trip. Loopback only;
// the loop is bounded by --n and --duration, and the server exits when the
// client closes its connections.
//go:build linux

package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/fibrilgo/fibril/cmd/fibrilctl/benchkit"
)

func main() {
	var err error
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		err = serve(os.Args[2:])
	} else {
		err = client(os.Args[1:])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rttfloor:", err)
		os.Exit(1)
	}
}

// Result is what one run measured, in µs.
type Result struct {
	Mode      string  `json:"mode"` // "floor", or "broker" (--broker)
	Deliver   bool    `json:"deliver"`
	AfterSync bool    `json:"deliver_after_sync,omitempty"`
	AutoAck   bool    `json:"auto_ack,omitempty"`
	BusyUS    float64 `json:"busy_us,omitempty"` // the floor's server kept a core busy this long during each fdatasync
	Size      int     `json:"size"`
	N         uint64  `json:"n"`
	RTTP50    float64 `json:"rtt_p50_us"`
	RTTP90    float64 `json:"rtt_p90_us"`
	RTTP99    float64 `json:"rtt_p99_us"`
	ConfP50   float64 `json:"confirm_p50_us"`
	ConfP99   float64 `json:"confirm_p99_us"`
	E2EP50    float64 `json:"e2e_p50_us,omitempty"`
	FsyncP50  float64 `json:"server_fdatasync_p50_us,omitempty"` // the floor's server only
	FsyncP99  float64 `json:"server_fdatasync_p99_us,omitempty"`
	ElapsedS  float64 `json:"elapsed_s"`
	ServerCPU float64 `json:"server_cpu_per_msg_us,omitempty"`
}

// serverStats is what the server sends back when the producer closes.
type serverStats struct {
	FsyncP50, FsyncP99 float64
	CPUNs              int64
}

const (
	roleProducer             = 'P' // a producer, and no consumer comes
	roleProducerWithConsumer = 'Q' // a producer, and a consumer comes
	roleConsumer             = 'C'
	reserveAhead             = 256 << 10
)

func us(ns uint64) float64 { return float64(ns/100) / 10 }

// options is the client's flags.
type options struct {
	dir, broker, user, password string
	n, size                     int
	d, busy                     time.Duration
	deliver, afterSync, autoAck bool
}

func client(args []string) error {
	fs := flag.NewFlagSet("rttfloor", flag.ContinueOnError)
	var cfg options
	fs.StringVar(&cfg.dir, "dir", "", "directory for the server's log and journal files (the broker's data directory's file system); required without --broker")
	fs.StringVar(&cfg.broker, "broker", "", "measure this Fibril broker (host:port) with the least client instead of the floor's server")
	fs.StringVar(&cfg.user, "user", "fibril", "--broker: user name")
	fs.StringVar(&cfg.password, "password", "fibril", "--broker: password")
	fs.IntVar(&cfg.n, "n", 20000, "messages, one at a time")
	fs.DurationVar(&cfg.d, "duration", 10*time.Second, "stop after this long even if --n are not done")
	fs.IntVar(&cfg.size, "size", 1024, "message size in bytes (at least 8)")
	fs.BoolVar(&cfg.deliver, "deliver", true, "deliver each message to a consumer that acks it (false: confirmed publish only)")
	fs.BoolVar(&cfg.afterSync, "deliver-after-sync", false, "write the delivery after the fdatasync, not before it (not with --broker)")
	fs.BoolVar(&cfg.autoAck, "auto-ack", false, "--broker: subscribe with auto-ack, so that the consumer sends no ACK")
	fs.DurationVar(&cfg.busy, "busy", 0, "the floor's server keeps a core busy this long (CPU only) while each fdatasync runs (not with --broker)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if cfg.dir == "" && cfg.broker == "" {
		return errors.New("--dir or --broker is required")
	}
	if cfg.broker != "" && (cfg.afterSync || cfg.busy != 0) {
		return errors.New("--deliver-after-sync and --busy are the floor's server's options, not a broker's")
	}
	if cfg.autoAck && (cfg.broker == "" || !cfg.deliver) {
		return errors.New("--auto-ack is for --broker with a consumer (--deliver)")
	}
	if cfg.busy < 0 || cfg.busy > time.Second {
		return errors.New("--busy must be between 0 and 1s")
	}
	if cfg.size < 8 || cfg.n < 1 || cfg.d <= 0 {
		return errors.New("--size must be at least 8, --n and --duration positive")
	}
	run := runFloor
	if cfg.broker != "" {
		run = runBroker
	}
	res, err := run(&cfg)
	if err != nil {
		return err
	}
	res.Size, res.AfterSync, res.AutoAck = cfg.size, cfg.deliver && cfg.afterSync, cfg.autoAck
	res.BusyUS = us(uint64(cfg.busy))
	if !*asJSON {
		fmt.Printf("%s (deliver=%v, after sync=%v, auto-ack=%v, busy=%v, %d B, %d messages): round trip p50 %.1f µs, p90 %.1f, p99 %.1f; confirm p50 %.1f",
			res.Mode, res.Deliver, res.AfterSync, res.AutoAck, cfg.busy, res.Size, res.N, res.RTTP50, res.RTTP90, res.RTTP99, res.ConfP50)
		if res.Mode == "floor" {
			fmt.Printf("; server fdatasync p50 %.1f, p99 %.1f", res.FsyncP50, res.FsyncP99)
		}
		fmt.Println()
		return nil
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

// runFloor starts the floor's server and measures it.
func runFloor(cfg *options) (*Result, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	srv := exec.Command(self, "serve", "--dir", cfg.dir, "--size", fmt.Sprint(cfg.size), "--deliver-after-sync="+fmt.Sprint(cfg.afterSync), "--busy", cfg.busy.String())
	srv.Stderr = os.Stderr
	// The server exits when this pipe ends, that is when this process
	// does, however it ends.
	if _, err := srv.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := srv.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := srv.Start(); err != nil {
		return nil, err
	}
	defer func() {
		// Closing the connections (deferred below, so done first) ends
		// the server, which removes its files: wait for that, within
		// reason.
		exited := make(chan struct{})
		go func() {
			_ = srv.Wait()
			close(exited)
		}()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = srv.Process.Kill()
			<-exited
		}
	}()
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("server did not start: %w", err)
	}
	addr = strings.TrimSpace(addr)
	role := byte(roleProducer)
	if cfg.deliver {
		role = roleProducerWithConsumer
	}
	prod, err := dial(addr, role)
	if err != nil {
		return nil, err
	}
	defer prod.Close()
	acked := make(chan [2]int64, 1) // delivery read, ack written
	if cfg.deliver {
		cons, err := dial(addr, roleConsumer)
		if err != nil {
			return nil, err
		}
		defer cons.Close()
		go consume(cons, cfg.size, acked)
	}
	p := &floorProducer{c: prod, msg: make([]byte, cfg.size), conf: make([]byte, 8)}
	return measure(p, acked, cfg.n, cfg.d, cfg.deliver)
}

func dial(addr string, role byte) (net.Conn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	if _, err := c.Write([]byte{role}); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// consume reads each delivery, writes its ack at once and reports both
// instants.
func consume(c net.Conn, size int, acked chan<- [2]int64) {
	buf := make([]byte, size)
	ack := make([]byte, 8)
	for {
		if _, err := io.ReadFull(c, buf); err != nil {
			close(acked)
			return
		}
		got := benchkit.Now()
		copy(ack, buf[:8])
		if _, err := c.Write(ack); err != nil {
			close(acked)
			return
		}
		acked <- [2]int64{got, benchkit.Now()}
	}
}

// producer is the measured side of the producer connection: the floor's
// server, or a broker (broker.go).
type producer interface {
	send(seq uint64) error // publish message seq
	confirm() error        // wait for the last send's confirm
	finish() (serverStats, error)
}

// floorProducer speaks the floor's own framing: the message, then an
// 8-byte confirm.
type floorProducer struct {
	c         net.Conn
	msg, conf []byte
}

func (f *floorProducer) send(seq uint64) error {
	binary.LittleEndian.PutUint64(f.msg, seq)
	_, err := f.c.Write(f.msg)
	return err
}

func (f *floorProducer) confirm() error {
	_, err := io.ReadFull(f.c, f.conf)
	return err
}

// finish half-closes: the server answers with its own numbers and exits.
func (f *floorProducer) finish() (serverStats, error) {
	var st serverStats
	if err := f.c.(*net.TCPConn).CloseWrite(); err != nil {
		return st, err
	}
	err := json.NewDecoder(f.c).Decode(&st)
	return st, err
}

func measure(p producer, acked <-chan [2]int64, n int, d time.Duration, deliver bool) (*Result, error) {
	var rtt, cf, e2e benchkit.Histogram
	start := benchkit.Now()
	stop := start + int64(d)
	for i := 0; i < n && benchkit.Now() < stop; i++ {
		t0 := benchkit.Now()
		if err := p.send(uint64(i)); err != nil {
			return nil, err
		}
		if err := p.confirm(); err != nil {
			return nil, fmt.Errorf("confirm: %w", err)
		}
		t1 := benchkit.Now()
		end := t1
		if deliver {
			a, ok := <-acked
			if !ok {
				return nil, errors.New("consumer connection ended")
			}
			e2e.Record(a[0] - t0)
			end = max(end, a[1])
		}
		cf.Record(t1 - t0)
		rtt.Record(end - t0)
	}
	elapsed := benchkit.Now() - start
	st, err := p.finish()
	if err != nil {
		return nil, fmt.Errorf("server stats: %w", err)
	}
	res := &Result{
		Mode: "floor", Deliver: deliver, N: rtt.Count(),
		RTTP50: us(rtt.Quantile(0.5)), RTTP90: us(rtt.Quantile(0.9)), RTTP99: us(rtt.Quantile(0.99)),
		ConfP50: us(cf.Quantile(0.5)), ConfP99: us(cf.Quantile(0.99)),
		FsyncP50: st.FsyncP50, FsyncP99: st.FsyncP99,
		ElapsedS: float64(elapsed/1e6) / 1e3,
	}
	if deliver {
		res.E2EP50 = us(e2e.Quantile(0.5))
	}
	if res.N > 0 {
		res.ServerCPU = float64(st.CPUNs/int64(res.N)/100) / 10
	}
	return res, nil
}

// serve is the server process: it prints its address, accepts the
// producer and the consumer its role announces, and serves until the
// producer half-closes (or its parent, the client, ends).
func serve(args []string) error {
	fs := flag.NewFlagSet("rttfloor serve", flag.ContinueOnError)
	dir := fs.String("dir", "", "")
	size := fs.Int("size", 1024, "")
	afterSync := fs.Bool("deliver-after-sync", false, "")
	busy := fs.Duration("busy", 0, "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	log, err := os.CreateTemp(*dir, "rttfloor-log-*")
	if err != nil {
		return err
	}
	defer os.Remove(log.Name())
	defer log.Close()
	journal, err := os.CreateTemp(*dir, "rttfloor-journal-*")
	if err != nil {
		return err
	}
	defer os.Remove(journal.Name())
	defer journal.Close()
	fmt.Println(ln.Addr())

	go func() { // the client is gone: stop
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(1)
	}()

	// The producer's role says whether a consumer comes; either may
	// connect first.
	var prod, cons net.Conn
	wantCons := false
	for prod == nil || (wantCons && cons == nil) {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		defer c.Close()
		role := make([]byte, 1)
		if _, err := io.ReadFull(c, role); err != nil {
			return fmt.Errorf("read role: %w", err)
		}
		switch role[0] {
		case roleProducer, roleProducerWithConsumer:
			prod, wantCons = c, role[0] == roleProducerWithConsumer
		case roleConsumer:
			cons = c
			go settle(c, journal)
		default:
			return fmt.Errorf("unknown role %q", role[0])
		}
	}
	var burn chan struct{}
	if *busy > 0 {
		burn = make(chan struct{}, 1)
		defer close(burn)
		go burner(burn, *busy)
	}
	cpu0 := cpuNs()
	var sync benchkit.Histogram
	msg := make([]byte, *size)
	conf := make([]byte, 8)
	var off, alloc int64
	fd := int(log.Fd())
	for {
		if _, err := io.ReadFull(prod, msg); err != nil {
			break // the client half-closed: report
		}
		if off+int64(len(msg)) > alloc {
			alloc = off + int64(len(msg)) + reserveAhead
			if err := log.Truncate(alloc); err != nil {
				return err
			}
		}
		if _, err := log.WriteAt(msg, off); err != nil {
			return err
		}
		off += int64(len(msg))
		if cons != nil && !*afterSync {
			if _, err := cons.Write(msg); err != nil {
				return err
			}
		}
		if burn != nil {
			// Woken by the send, the burner would wait in this P's run
			// queue while this goroutine sits in the fdatasync (the
			// runtime does not hand the P off at once); yield so that it
			// runs now and this goroutine moves to the other core. A
			// burner still busy from the last kick is left to it: the
			// server never waits for it.
			select {
			case burn <- struct{}{}:
				runtime.Gosched()
			default:
			}
		}
		t := benchkit.Now()
		if err := fdatasync(fd); err != nil {
			return err
		}
		sync.Record(benchkit.Now() - t)
		if cons != nil && *afterSync {
			if _, err := cons.Write(msg); err != nil {
				return err
			}
		}
		copy(conf, msg[:8])
		if _, err := prod.Write(conf); err != nil {
			return err
		}
	}
	st := serverStats{FsyncP50: us(sync.Quantile(0.5)), FsyncP99: us(sync.Quantile(0.99)), CPUNs: cpuNs() - cpu0}
	return json.NewEncoder(prod).Encode(st)
}

// burner keeps a core busy for d after each kick (--busy), until kicks
// is closed. It spins on the clock: CPU only, no syscall.
func burner(kicks <-chan struct{}, d time.Duration) {
	for range kicks {
		end := benchkit.Now() + int64(d)
		for benchkit.Now() < end {
		}
	}
}

// settle reads the consumer's acks and appends a 13-byte entry per ack
// to the journal, not fsynced.
func settle(c net.Conn, journal *os.File) {
	ack := make([]byte, 8)
	entry := make([]byte, 13)
	var off int64
	for {
		if _, err := io.ReadFull(c, ack); err != nil {
			return
		}
		copy(entry, ack)
		if _, err := journal.WriteAt(entry, off); err != nil {
			return
		}
		off += int64(len(entry))
	}
}

func fdatasync(fd int) error {
	for {
		err := syscall.Fdatasync(fd)
		if err != syscall.EINTR {
			return err
		}
	}
}

// cpuNs is this process's user + system CPU time.
func cpuNs() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
