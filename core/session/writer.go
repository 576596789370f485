package session

import (
	"bufio"
	"encoding/binary"
	"time"

	"github.com/fibrilgo/fibril/core/queue"
	"github.com/fibrilgo/fibril/core/wire"
)

// writeLoop owns the socket's write side. It wakes when answers or pushes
// are queued or the heartbeat ticks, writes everything pending through one
// buffer and flushes once per round, so a burst of confirms or deliveries
// costs one write syscall.
func (c *Conn) writeLoop() {
	defer close(c.writerDone)
	h := c.srv.opts.Heartbeat
	tick := time.NewTicker(h)
	defer tick.Stop()
	for {
		ping := false
		select {
		case <-c.wake:
		case <-tick.C:
			idle := time.Duration(c.srv.opts.Now().UnixNano() - c.lastRecv.Load())
			if idle > 3*h && !c.handling.Load() {
				// S-11 / docs/protocol.md#heartbeats: no frame of any kind for 3H → close
				// without sending anything. Time the reader spends on a
				// frame it read does not count (Conn.handling).
				c.log.Info("closing idle connection", "idle", idle.Round(time.Millisecond))
				c.srv.opts.Metrics.ConnErrors.WithLabelValues("idle_timeout").Inc()
				c.close()
				return
			}
			ping = true
		case <-c.done:
			return
		}
		c.wlock.Lock()
		ok := c.writeRound(ping)
		c.wlock.Unlock()
		if !ok {
			return
		}
	}
}

// commitOwed runs after the reader has handled the last frame it had read
// (it is about to wait for input). If that frame was a confirmed publish,
// its commit — the write and fsync, and the callbacks that queue the
// PUBLISH_OKs — runs here on the reader when the storage committer is idle
// (queue.Partition.CommitIfIdle), and the reader then writes the confirms
// itself (writeAnswers). Both save a goroutine wake-up, which on a small VM
// costs tens of microseconds each: the committer's, then the writer's.
// Confirms of other connections committed by the same pass are queued and
// their writers woken as usual. Reader goroutine only; it holds no lock
// here, as CommitIfIdle requires.
// committer is a partition whose deferred publishes commitOwed commits:
// a queue's or a stream's.
type committer interface{ CommitIfIdle() bool }

func (c *Conn) commitOwed() {
	part := c.owed
	if part == nil {
		return
	}
	c.owed = nil
	c.mu.Lock()
	c.holdKick = true
	c.mu.Unlock()
	part.CommitIfIdle()
	c.mu.Lock()
	c.holdKick = false
	n := len(c.replies)
	c.mu.Unlock()
	if n > 0 {
		// Queued while the kick was held (by this pass or by any other
		// goroutine meanwhile), or queued before and not written yet:
		// either way the queue is written now, or the writer is woken.
		c.writeAnswers()
	}
}

// writeAnswers writes the queued answers on the calling goroutine and
// flushes them, when the writer is not in a round (wlock is free) and
// every answer is a plain one. Otherwise it wakes the writer, which then
// writes them. Order is kept: whoever holds wlock takes the whole queue in
// order, and only answers are written here — pushes stay with the writer,
// which writes them after the answers queued before them anyway (so
// SUBSCRIBE_OK still precedes the subscription's first DELIVER). Answers
// are allowed in the quiet window; the frames that change the writer's
// state (RECONCILE_RESULT opening the window, close-after, finish) are
// left to the writer.
func (c *Conn) writeAnswers() {
	if !c.wlock.TryLock() {
		c.kick() // the writer is in a round: it goes round once more
		return
	}
	defer c.wlock.Unlock()
	c.mu.Lock()
	replies := c.replies
	for i := range replies {
		if f := &replies[i]; f.finish || f.closeAfter || f.opensWindow {
			c.mu.Unlock()
			c.kick()
			return
		}
	}
	c.replies = c.spare[:0]
	c.mu.Unlock()
	for i := range replies {
		if !c.writeAnswer(&replies[i]) {
			return
		}
		replies[i] = outFrame{}
	}
	c.recycleReplies(replies)
	c.flush()
}

// writeAnswer buffers one answer and gives back its reply slot. It
// reports false when the write failed (the connection is closing). Holder
// of wlock only.
func (c *Conn) writeAnswer(f *outFrame) bool {
	c.scratch = appendOut(c.scratch[:0], f)
	if _, err := c.out().Write(c.scratch); err != nil {
		return c.writeFailed(err)
	}
	if f.slot {
		c.releaseSlot()
	}
	if f.relay > 0 {
		c.relay.Written(f.relay)
	}
	return true
}

// recycleReplies keeps a written (and cleared) answer queue for reuse.
func (c *Conn) recycleReplies(replies []outFrame) {
	c.mu.Lock()
	c.spare = replies[:0]
	c.mu.Unlock()
}

// writeRound writes what is pending. Pushes are taken before answers and
// written after them: an answer queued before a push (SUBSCRIBE_OK before
// that subscription's first DELIVER) is then always written first. It
// reports false when the connection must stop.
func (c *Conn) writeRound(ping bool) bool {
	finish := false
	for again := true; again; {
		again = false
		pushes := c.takePushes()
		c.mu.Lock()
		replies := c.replies
		c.replies = c.spare[:0]
		c.mu.Unlock()

		for i := range replies {
			f := &replies[i]
			if f.finish {
				finish = true
				continue
			}
			if !c.writeAnswer(f) {
				return false
			}
			if f.opensWindow && !c.windowOpen.Swap(true) {
				close(c.opened)
				again = pushes == nil // RECONCILE_RESULT is out: take the held pushes now
			}
			if f.closeAfter {
				c.flush()
				c.close()
				return false
			}
			replies[i] = outFrame{}
		}
		c.recycleReplies(replies)

		for _, p := range pushes {
			if !c.writePush(p) {
				return false
			}
		}
		c.sess.recyclePushes(pushes)
		if pushes != nil {
			c.sess.unthrottle(c)
		}
		if ping && c.windowOpen.Load() {
			ping = false
			c.scratch = wire.AppendFrame(c.scratch[:0], wire.OpPing, c.nextPushID(), nil)
			if _, err := c.out().Write(c.scratch); err != nil {
				return c.writeFailed(err)
			}
		}
	}
	if !c.flush() {
		return false
	}
	if finish {
		c.lingerClose()
		return false
	}
	return true
}

// lingerClose ends a connection the broker is closing on purpose (a
// shutdown) in order: half-close so the client reads every frame and then
// EOF, discard what the client still sends for a moment, then close.
// Closing with unread input would make the kernel answer with a reset.
// Writer goroutine only, once the reader has stopped.
func (c *Conn) lingerClose() {
	if cw, ok := c.nc.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		_ = c.nc.SetReadDeadline(time.Now().Add(time.Second))
		var sink [4096]byte
		for {
			if _, err := c.nc.Read(sink[:]); err != nil {
				break
			}
		}
	}
	c.close()
}

// takePushes takes the session's queued pushes if this connection is the
// one the session follows and its quiet window is over.
func (c *Conn) takePushes() []push {
	if !c.windowOpen.Load() {
		return nil
	}
	return c.sess.takePushes(c)
}

// out is the write buffer of this round, taken from writeBufs when the
// round has not written yet. Holder of wlock only.
func (c *Conn) out() *bufio.Writer {
	if c.bw == nil {
		c.bw = writeBufs.Get().(*bufio.Writer)
		c.bw.Reset(c.counted)
	}
	return c.bw
}

// flush ends a round: what it buffered goes to the socket and the buffer
// back to writeBufs. Holder of wlock only.
func (c *Conn) flush() bool {
	if c.bw == nil {
		return true
	}
	if c.bw.Buffered() > 0 {
		// A client that stops reading must not hold the writer forever: a
		// flush that makes no progress for 3H ends the connection.
		_ = c.nc.SetWriteDeadline(c.srv.opts.Now().Add(3 * c.srv.opts.Heartbeat))
		if err := c.bw.Flush(); err != nil {
			c.bw = nil // it holds the error: not for reuse
			return c.writeFailed(err)
		}
	}
	c.bw.Reset(nil)
	writeBufs.Put(c.bw)
	c.bw = nil
	return true
}

func (c *Conn) writeFailed(err error) bool {
	select {
	case <-c.done:
	default:
		c.srv.opts.Metrics.ConnErrors.WithLabelValues("write").Inc()
		c.log.Debug("write failed", "err", err)
	}
	c.close()
	return false
}

func (c *Conn) nextPushID() uint64 {
	id := c.pushID
	c.pushID++
	return id
}

// writePush encodes one push with a fresh broker-initiated request id.
func (c *Conn) writePush(p push) bool {
	switch {
	case p.delivery != nil:
		c.scratch = appendDeliver(c.scratch[:0], c.nextPushID(), p.sub.id, p.delivery)
	case p.op == wire.OpGoingAway:
		c.scratch = wire.AppendFrame(c.scratch[:0], p.op, 0, p.body) // docs/protocol.md#request-ids: always id 0
	default:
		c.scratch = wire.AppendFrame(c.scratch[:0], p.op, c.nextPushID(), p.body)
	}
	if _, err := c.out().Write(c.scratch); err != nil {
		return c.writeFailed(err)
	}
	return true
}

// appendOut encodes one answer. PUBLISH_OK without a body is the inline
// confirm: encoded here so the confirm path allocates nothing.
func appendOut(dst []byte, f *outFrame) []byte {
	if f.op == wire.OpPublishOK && f.body == nil {
		start := len(dst)
		dst = wire.AppendFrameHeader(dst, wire.FrameHeader{Version: wire.ProtocolVersion, Op: f.op, RequestID: f.reqID})
		ok := wire.PublishOK{Offset: f.offset}
		dst = ok.AppendTo(dst)
		return patchLen(dst, start)
	}
	return wire.AppendFrame(dst, f.op, f.reqID, f.body)
}

// appendDeliver encodes a DELIVER frame without boxing the body in an
// interface (which would allocate per delivery).
func appendDeliver(dst []byte, reqID, subID uint64, d *queue.Delivery) []byte {
	start := len(dst)
	dst = wire.AppendFrameHeader(dst, wire.FrameHeader{Version: wire.ProtocolVersion, Op: wire.OpDeliver, RequestID: reqID})
	body := wire.Deliver{
		SubID:           subID,
		Topic:           d.Topic,
		Group:           d.Group,
		Partition:       d.Partition,
		Offset:          d.Offset,
		DeliveryTag:     d.Tag,
		Published:       d.Published,
		PublishReceived: uint64(d.Received),
		ContentType:     d.ContentType,
		Headers:         d.Headers,
		Payload:         d.Payload,
	}
	dst = body.AppendTo(dst)
	return patchLen(dst, start)
}

func patchLen(dst []byte, start int) []byte {
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-wire.HeaderSize))
	return dst
}
