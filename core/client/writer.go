package client

import (
	"context"
	"encoding/binary"
	"fmt"
	"sort"
	"time"

	"github.com/fibrilgo/fibril/core/wire"
)

// The write side of a Conn: one buffer, one writer goroutine, bounded
// (see Conn's doc comment, "Writes").

// waitRoomLocked waits (wmu held, released while waiting) until the buffer
// has room: it holds less than wmax bytes. A frame is then accepted whole,
// so the buffer overshoots the bound by at most one frame. The error is a
// *notWrittenError (connection closed, or ctx ended while waiting).
func (c *Conn) waitRoomLocked(ctx context.Context) error {
	for !c.wclosed && c.wdrain == nil && len(c.wbuf) >= c.wmax {
		ch := c.wspace
		if ch == nil {
			ch = make(chan struct{})
			c.wspace = ch
		}
		c.wmu.Unlock()
		select {
		case <-ch:
			c.wmu.Lock()
		case <-ctx.Done():
			c.wmu.Lock()
			return &notWrittenError{err: ctx.Err()}
		}
	}
	return c.refuseLocked()
}

// queueFrame appends one frame for the writer. p, when set, records the
// frame's end offset (for the written / not-written decision). Control
// frames (PING, PONG, TOPOLOGY_UPDATE_ACK) skip the bound, so that the
// reader and the heartbeat never wait for room.
func (c *Conn) queueFrame(ctx context.Context, op wire.Op, id uint64, body wire.Encoder, p *pendingReq, control bool) error {
	c.wmu.Lock()
	var err error
	if control {
		err = c.refuseLocked()
	} else {
		err = c.waitRoomLocked(ctx)
	}
	if err != nil {
		c.wmu.Unlock()
		return err
	}
	if p != nil && p.dead {
		c.wmu.Unlock()
		return &notWrittenError{err: context.DeadlineExceeded}
	}
	c.wbuf = wire.AppendFrame(c.wbuf, op, id, body)
	c.lastAck.valid = false
	if p != nil {
		p.end = c.wbase + uint64(len(c.wbuf))
	}
	// Alone: a control frame, or the only request awaiting an answer
	// (registered before it was queued). Frames without a reply (a
	// fire-and-forget PUBLISH, a NACK) come in streams: the writer
	// batches them.
	c.wakeWriterLocked(control || p != nil && c.live.Load() <= 1)
	c.wmu.Unlock()
	c.stats.framesQueued.Add(1)
	return nil
}

// queueAck queues an ACK for tags, merging it into the ACK that ends the
// buffer when that one settles the same (topic, partition, group): the
// merged frame keeps the request id of its first DELIVER (the broker does
// not read it, docs/protocol.md#subscriptions).
func (c *Conn) queueAck(ctx context.Context, id uint64, topic string, group wire.Option[string], partition uint32, tags []uint64) error {
	c.wmu.Lock()
	if err := c.refuseLocked(); err != nil {
		c.wmu.Unlock()
		return err
	}
	if la := &c.lastAck; la.valid && la.partition == partition && la.topic == topic && la.group == group &&
		la.n+len(tags) <= maxMergedTags {
		for _, t := range tags {
			c.wbuf = binary.BigEndian.AppendUint64(c.wbuf, t)
		}
		la.n += len(tags)
		binary.BigEndian.PutUint32(c.wbuf[la.count:], uint32(la.n))
		binary.BigEndian.PutUint32(c.wbuf[la.start:], uint32(len(c.wbuf)-la.start-wire.HeaderSize))
		// The buffer was not empty, so the writer is already due.
		c.wmu.Unlock()
		c.stats.acksMerged.Add(1)
		return nil
	}
	if err := c.waitRoomLocked(ctx); err != nil {
		c.wmu.Unlock()
		return err
	}
	start := len(c.wbuf)
	c.ackScratch = wire.Ack{Topic: topic, Group: group, Partition: partition, Tags: tags}
	c.wbuf = wire.AppendFrame(c.wbuf, wire.OpAck, id, &c.ackScratch)
	c.ackScratch = wire.Ack{}
	c.lastAck = ackTail{valid: true, start: start, count: len(c.wbuf) - 8*len(tags) - 4, n: len(tags),
		topic: topic, group: group, partition: partition}
	// Alone: it settles every delivery this connection holds (they are
	// uncounted once their settle is queued). While others are held their
	// ACKs follow soon, and merge while this one waits for the writer.
	c.wakeWriterLocked(c.unsettled.Load() <= int64(len(tags)))
	c.wmu.Unlock()
	c.stats.framesQueued.Add(1)
	return nil
}

// wakeWriterLocked is called after a frame was queued. alone says the
// frame has no company coming (Conn's doc comment, "Writes"): then, if
// the writer is idle, the caller writes it.
func (c *Conn) wakeWriterLocked(alone bool) {
	if !c.wwaiting {
		return // the writer is busy: it takes the frame with the next Write
	}
	if alone && c.raw != nil && c.writeNowLocked() {
		return
	}
	c.wwaiting = false
	c.wcond.Signal()
}

// writeNowLocked makes one non-blocking write of the buffer, which holds
// only what was queued since the writer went idle, and keeps what the
// socket did not take for the writer. It reports whether the buffer is
// now empty. It never waits: a full socket buffer, an expired write
// deadline or an error write nothing here, and the writer then meets the
// same condition and deals with it as it does with any Write.
func (c *Conn) writeNowLocked() bool {
	b := c.wbuf
	n := c.raw.write(b)
	if n == 0 {
		return false
	}
	c.stats.writeCalls.Add(1)
	c.stats.callerWrites.Add(1)
	c.stats.bytesWritten.Add(uint64(n))
	c.wbase += uint64(n)
	c.whanded = c.wbase // what left counts as written (Conn's doc comment)
	c.lastAck.valid = false
	if n == len(b) {
		if cap(b) > 2*c.wmax {
			c.wbuf = nil // as the writer does: a huge frame's buffer is not kept
		} else {
			c.wbuf = b[:0]
		}
		return true
	}
	c.wbuf = b[n:] // the rest, for the writer (not moved: it may be large)
	return false
}

// writeLoop is the connection's only writer: it hands everything queued
// to one Write, then looks again. When the connection ends it completes
// the pending requests.
func (c *Conn) writeLoop() {
	defer c.resolvePending()
	deadline := max(10*time.Second, 3*c.hb)
	for {
		c.wmu.Lock()
		for len(c.wbuf) == 0 && !c.wclosed {
			c.wwaiting = true
			c.wcond.Wait()
		}
		if c.wclosed {
			c.wmu.Unlock()
			return
		}
		b := c.wbuf
		start := c.wbase
		c.wbase += uint64(len(b))
		c.whanded = c.wbase // from here on these frames count as written
		c.wbuf, c.wspare = c.wspare[:0], nil
		c.wwriting = true
		c.lastAck.valid = false
		if c.wspace != nil {
			close(c.wspace)
			c.wspace = nil
		}
		c.wmu.Unlock()

		c.nc.SetWriteDeadline(time.Now().Add(deadline))
		n, err := c.nc.Write(b)
		c.stats.writeCalls.Add(1)
		c.stats.bytesWritten.Add(uint64(n))

		c.wmu.Lock()
		c.wwriting = false
		c.checkDrainedLocked()
		if err != nil {
			// The bytes past n never left: a frame cut there was not
			// written (the broker sees at most a truncated frame and the
			// stream ends), nor were the frames after it.
			c.whanded = start + uint64(n)
			c.wmu.Unlock()
			c.fail(fmt.Errorf("%w: write: %v", ErrConnectionLost, err))
			return
		}
		if cap(b) <= 2*c.wmax {
			c.wspare = b[:0]
		}
		c.wmu.Unlock()
	}
}

// resolvePending completes every request still pending once the writer
// has stopped, so the written / not-written boundary is final: requests
// whose frame was handed to Write get ErrOutcomeUnknown, the others a
// not-written error (re-sendable). Never-written async publishes are
// re-sent together, in their original order.
func (c *Conn) resolvePending() {
	c.mu.Lock()
	pend := c.pending
	c.pending = make(map[uint64]*pendingReq)
	c.live.Store(0)
	for _, w := range c.watch {
		w.stop()
	}
	c.watch = nil
	cause := c.err
	c.mu.Unlock()
	if cause == nil {
		cause = ErrConnectionLost
	}
	if len(pend) == 0 {
		return
	}
	list := make([]*pendingReq, 0, len(pend))
	c.wmu.Lock()
	written := c.whanded
	for _, p := range pend {
		if !p.abandoned {
			list = append(list, p)
		}
	}
	sort.Slice(list, func(i, j int) bool { return list[i].end < list[j].end })
	var resend []*pubOp
	var fates []bool // written?
	for _, p := range list {
		fates = append(fates, p.end != 0 && p.end <= written)
	}
	c.wmu.Unlock()
	for i, p := range list {
		p.done = nil
		if fates[i] {
			p.h.onReply(Frame{}, &OutcomeUnknownError{Op: p.op, Cause: cause})
			continue
		}
		if op, ok := p.h.(*pubOp); ok {
			resend = append(resend, op)
			continue
		}
		p.h.onReply(Frame{}, &notWrittenError{err: cause})
	}
	if len(resend) > 0 {
		go resendNeverWritten(resend, cause)
	}
}

// waitRoom waits until the write buffer has room (before a request is
// registered, so that a context ending during the wait simply fails the
// call).
func (c *Conn) waitRoom(ctx context.Context) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.waitRoomLocked(ctx)
}
