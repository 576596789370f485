package session

import (
	"context"
	"net"
	"sync"

	"github.com/fibrilgo/fibril/core/replica"
	"github.com/fibrilgo/fibril/core/wire"
)

// Replication serves the node-only replication ops
// (docs/protocol.md#replication-ops) of connections logged in as @node;
// *replica.Source implements it. Options.Replication nil: those ops are
// answered 400 "not supported by this broker yet".
type Replication interface {
	Read(ctx context.Context, req *wire.ReadRequest) (*wire.ReadOK, error)
	Checkpoint(key wire.QueueKey, follower string) (*wire.StateCheckpoint, error)
	Stream(ctx context.Context, id uint64, start *wire.ReplicationStreamStart, in <-chan replica.Frame, out replica.Sender) error
}

// replStreams are a connection's running replication streams: each runs
// on its own goroutine and gets the follower's later frames of its stream
// (progress, reset, stop) through its channel.
type replStreams struct {
	mu     sync.Mutex
	byID   map[uint64]chan replica.Frame
	ctx    context.Context
	cancel context.CancelFunc
}

// replSender queues a stream's frames as pushes (no reply slot; the
// follower's credit bounds what is queued); the writer encodes them (a
// stream never changes a body it sent, see replica.Sender).
type replSender Conn

func (s *replSender) Send(op wire.Op, id uint64, body wire.Encoder) error {
	c := (*Conn)(s)
	select {
	case <-c.done:
		return net.ErrClosed
	default:
	}
	c.enqueue(outFrame{op: op, reqID: id, body: body})
	return nil
}

// handleReplication answers a replication op on an @node connection.
// Reader goroutine; body is valid until it returns.
func (c *Conn) handleReplication(op wire.Op, id uint64, body []byte) {
	b, err := wire.DecodeBody(op, body)
	if err != nil {
		c.replyError(id, wire.CodeBadRequest, "malformed frame: "+err.Error())
		return
	}
	repl := c.srv.opts.Replication
	switch b := b.(type) {
	case *wire.ReplicationRead:
		c.replicationRead(id, b.ReadRequest, func(ok *wire.ReadOK) (wire.Op, wire.Encoder) {
			return wire.OpReplicationReadOK, &wire.ReplicationReadOK{ReadOK: *ok}
		})
	case *wire.StreamReplicationRead:
		// A stream partition's pull read: the same read as op 80, whose
		// key names the stream (its group is always absent).
		c.replicationRead(id, b.ReadRequest, func(ok *wire.ReadOK) (wire.Op, wire.Encoder) {
			return wire.OpStreamReplicationReadOK, &wire.StreamReplicationReadOK{ReadOK: *ok}
		})
	case *wire.ReplicationCheckpointExport:
		cp, err := repl.Checkpoint(b.Key, c.peerNode)
		if err != nil {
			c.replyError(id, wire.CodeBadRequest, err.Error())
			return
		}
		c.reply(wire.OpReplicationCheckpointExportOK, id, &wire.ReplicationCheckpointExportOK{StateCheckpoint: *cp})
	case *wire.ReplicationStreamStart:
		start := *b
		ch := make(chan replica.Frame, 16)
		rs := c.replStreams()
		rs.mu.Lock()
		if old, ok := rs.byID[id]; ok {
			close(old) // a new START with the same id replaces the stream
		}
		rs.byID[id] = ch
		rs.mu.Unlock()
		go func() {
			_ = repl.Stream(rs.ctx, id, &start, ch, (*replSender)(c))
			rs.mu.Lock()
			if rs.byID[id] == ch {
				delete(rs.byID, id)
			}
			rs.mu.Unlock()
		}()
	case *wire.ReplicationStreamProgress, *wire.ReplicationStreamReset, *wire.Empty:
		rs := c.replStreams()
		rs.mu.Lock()
		ch := rs.byID[id]
		if ch != nil && op == wire.OpReplicationStreamStop {
			close(ch)
			delete(rs.byID, id)
			ch = nil
		}
		rs.mu.Unlock()
		if ch != nil {
			select { // the stream drains its channel between batches
			case ch <- replica.Frame{Op: op, RequestID: id, Body: b}:
			case <-c.done:
			}
		}
		// A frame of an unknown stream (one that just ended) is dropped.
	default:
		c.replyError(id, wire.CodeBadRequest, op.String()+" is not supported by this broker yet")
	}
}

// replStreams returns the connection's stream registry, made on first use.
// Reader goroutine.
func (c *Conn) replStreams() *replStreams {
	if c.repl == nil {
		ctx, cancel := context.WithCancel(context.Background())
		c.repl = &replStreams{byID: make(map[uint64]chan replica.Frame), ctx: ctx, cancel: cancel}
	}
	return c.repl
}

// endReplication stops the connection's streams (it is closing).
func (c *Conn) endReplication() {
	rs := c.repl
	if rs == nil {
		return
	}
	rs.cancel()
	rs.mu.Lock()
	for id, ch := range rs.byID {
		close(ch)
		delete(rs.byID, id)
	}
	rs.mu.Unlock()
}

// replicationRead answers a pull read (op 80 or 99) in the background
// with the answer answer builds.
func (c *Conn) replicationRead(id uint64, req wire.ReadRequest, answer func(*wire.ReadOK) (wire.Op, wire.Encoder)) {
	ctx := c.replStreams().ctx // req's strings are copies; nothing aliases the frame's body
	c.deferReply()
	go func() {
		ok, err := c.srv.opts.Replication.Read(ctx, &req)
		if err != nil {
			c.enqueue(outFrame{op: wire.OpError, reqID: id, body: &wire.ErrorBody{Code: wire.CodeBadRequest, Message: err.Error()}, slot: true})
			return
		}
		op, body := answer(ok)
		c.enqueue(outFrame{op: op, reqID: id, body: body, slot: true})
	}()
}
