package plugins

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/plugins/internal/frame"
)

// pump copies one stream between the host's data connection (framed) and
// the transport's stream, mapping ends both ways: FIN ⇄ CloseWrite/EOF,
// RESET ⇄ Abort/aborted read, and a data connection lost without either is
// an abort.
type pump struct {
	srv *TransportServer
	c   net.Conn
	s   core.Stream
	in  bool

	// wdl is the write deadline the pump keeps on the stream while it
	// writes to it (zero: none set); see writeInner. Only fromHost's
	// goroutine (run) touches it.
	wdl time.Time

	aborted atomic.Bool
	// over is set once run has decided how the stream ends: toHost then
	// leaves quietly instead of reporting its failing read as an abort.
	over atomic.Bool
	// wmu serialises frames written to c (stream bytes, FIN, RESET);
	// broken records a frame only partly written, after which a RESET
	// would be read as payload and must not be sent.
	wmu    sync.Mutex
	broken bool
}

func (p *pump) run() {
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.toHost()
	}()
	orderly := p.fromHost()
	// The host's side is over: release the connection first, so that
	// toHost fails its next write rather than block, then the stream.
	p.over.Store(true)
	p.c.Close()
	p.clearDeadline()
	if orderly && !p.aborted.Load() {
		_ = p.s.Close()
	} else {
		p.aborted.Store(true)
		_ = p.s.Abort()
	}
	<-done
	p.srv.ended(p.in, p.aborted.Load())
}

// fromHost applies the host's frames to the stream until the connection
// ends; orderly is whether the host's direction had ended with FIN (its
// connection closing afterwards is then Close, not Abort).
func (p *pump) fromHost() (orderly bool) {
	fr := frame.NewReader(p.c)
	buf := make([]byte, frame.MaxPayload)
	finSeen := false
	for {
		typ, n, reason, err := fr.Next()
		if err != nil {
			if !finSeen && !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.EOF) {
				p.srv.log.Debug("data connection ended without FIN", "error", err)
			}
			return finSeen
		}
		switch typ {
		case frame.Data:
			if finSeen {
				p.srv.log.Warn("host sent DATA after FIN; aborting the stream")
				return false
			}
			for n > 0 {
				m, err := fr.ReadData(buf[:min(n, len(buf))])
				if m > 0 {
					if werr := p.writeInner(buf[:m]); werr != nil {
						// The stream is gone under us (peer abort; toHost
						// reports it to the host when its read fails), or
						// the host is.
						return false
					}
				}
				n -= m
				if err != nil {
					return false
				}
			}
		case frame.FIN:
			if !finSeen {
				finSeen = true
				p.clearDeadline()
				if err := p.s.CloseWrite(); err != nil {
					return false
				}
			}
		case frame.Reset:
			p.srv.log.Debug("host aborted the stream", "reason", reason)
			return false
		}
	}
}

// innerWriteCheck is how long a write to the transport's stream may block
// (its peer does not read) before the pump checks that the host is still
// there. Without the check, a host that aborted such a stream would leave
// the pump blocked in that write, and the abort would never reach the
// peer: the RESET waits unread behind the bytes the pump cannot deliver.
const innerWriteCheck = time.Second

// errHostGone ends a write to the stream whose host closed its side.
var errHostGone = errors.New("the host closed the data connection")

// writeInner writes b to the stream. It keeps a write deadline on the
// stream, moved forward at most twice per innerWriteCheck (a deadline per
// frame would cost more than the frame), so a write blocked by a peer that
// does not read wakes up to check the host; a passed deadline leaves the
// stream usable and the write resumes. The loop ends when b is written,
// the stream fails, or the host is gone.
func (p *pump) writeInner(b []byte) error {
	for {
		if now := time.Now(); p.wdl.IsZero() || now.After(p.wdl.Add(-innerWriteCheck/2)) {
			p.wdl = now.Add(innerWriteCheck)
			_ = p.s.SetWriteDeadline(p.wdl)
		}
		n, err := p.s.Write(b)
		p.srv.stats.bytesOut.Add(uint64(n))
		b = b[n:]
		switch {
		case err == nil:
			return nil
		case !frame.IsTimeout(err):
			return err
		case !p.hostAlive():
			return errHostGone
		}
	}
}

// clearDeadline removes the pump's write deadline before an orderly end,
// which a transport bounds by the write deadline when one is set.
func (p *pump) clearDeadline() {
	if !p.wdl.IsZero() {
		p.wdl = time.Time{}
		_ = p.s.SetWriteDeadline(time.Time{})
	}
}

// emptyData is a DATA frame without payload: the host's reader skips it.
var emptyData = [frame.HeaderLen]byte{frame.Data}

// hostAlive writes an empty DATA frame, which fails once the host closed
// the connection. It may wait for toHost's write in progress, or for a
// host that does not read; both end when the host closes.
func (p *pump) hostAlive() bool {
	return p.write(emptyData[:])
}

// toHost copies the stream's bytes to the host until the stream's read
// side ends: with FIN after io.EOF, with RESET (and the connection closed,
// so that fromHost ends too) after anything else.
func (p *pump) toHost() {
	buf := make([]byte, frame.HeaderLen+frame.MaxPayload)
	for {
		n, err := p.s.Read(buf[frame.HeaderLen:])
		if n > 0 {
			frame.PutHeader(buf, frame.Data, n)
			if !p.write(buf[:frame.HeaderLen+n]) {
				// The host closed its side; fromHost sees that too and
				// decides between Close and Abort.
				return
			}
			p.srv.stats.bytesIn.Add(uint64(n))
		}
		switch {
		case err == nil:
			continue
		case p.over.Load():
		case errors.Is(err, io.EOF):
			p.write(fin[:])
		default:
			p.abort(err.Error())
		}
		return
	}
}

// fin is a FIN frame.
var fin = [frame.HeaderLen]byte{frame.FIN}

// write writes one whole frame, or marks the connection broken.
func (p *pump) write(b []byte) bool {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if p.broken {
		return false
	}
	if _, err := p.c.Write(b); err != nil {
		p.broken = true
		return false
	}
	return true
}

// abort sends RESET to the host, aborts the stream and closes the data
// connection.
func (p *pump) abort(reason string) {
	if p.aborted.Swap(true) {
		return
	}
	// A writer stuck on a host that does not read must not hold the RESET
	// back for ever.
	_ = p.c.SetWriteDeadline(time.Now().Add(time.Second))
	p.wmu.Lock()
	if !p.broken {
		_ = frame.WriteControl(p.c, frame.Reset, reason)
	}
	p.wmu.Unlock()
	_ = p.s.Abort()
	p.c.Close()
}
