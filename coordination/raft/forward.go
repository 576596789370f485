package raft

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fibrilgo/fibril/core"
)

var errNoLeader = errors.New("no leader elected")

// toLeader runs req on the current leader: locally when this member
// leads, else over the RPC channel. While there is no leader, or the
// leader is changing, it retries (waking on leader changes, with a
// backoff) until ctx ends; it then returns an error wrapping
// core.ErrCoordinationUnavailable. An apply whose request may have
// reached a leader that then failed is not resent: its outcome is
// unknown, and resending could apply it twice.
func (c *Coordinator) toLeader(ctx context.Context, req *rpcRequest) (*rpcResponse, error) {
	backoff := 5 * time.Millisecond
	var last error
	for {
		if c.closed.Load() {
			return nil, core.ErrClosed
		}
		wake := c.leaderWait()
		resp, err := c.tryLeader(ctx, req)
		if err != nil {
			return nil, err
		}
		switch resp.Code {
		case codeNotLeader, codeUnavailable, codeClosed:
			last = errors.New(resp.Msg)
		case codeUnknown:
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("raft: %s; the write may or may not have been applied: %w (%w, %w)", resp.Msg, err, core.ErrCoordinationUnavailable, core.ErrOutcomeUnknown)
			}
			return nil, fmt.Errorf("raft: %s; the write may or may not have been applied: %w (%w)", resp.Msg, core.ErrCoordinationUnavailable, core.ErrOutcomeUnknown)
		default:
			return resp, nil
		}
		select {
		case <-ctx.Done():
			// ctx.Err() first: the contract says a cancelled or expired
			// context returns it; the backend's state rides along.
			return nil, fmt.Errorf("raft: %w (%v; %w)", ctx.Err(), last, core.ErrCoordinationUnavailable)
		case <-c.ctx.Done():
			return nil, core.ErrClosed
		case <-wake:
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 250*time.Millisecond)
	}
}

// tryLeader makes one attempt. Failures worth retrying come back as a
// response with a retryable code; an error ends the call.
func (c *Coordinator) tryLeader(ctx context.Context, req *rpcRequest) (*rpcResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("raft: %w (%w)", err, core.ErrCoordinationUnavailable)
	}
	addr, id := c.raft.LeaderWithID()
	switch {
	case id == "":
		return &rpcResponse{Code: codeUnavailable, Msg: errNoLeader.Error()}, nil
	case string(id) == c.opts.NodeID:
		return c.handle(ctx, req), nil
	}
	c.metrics.forwarded.WithLabelValues(req.Op).Inc()
	resp, sent, err := c.pool.call(ctx, string(id), string(addr), req)
	if err == nil {
		return resp, nil
	}
	if sent && !req.idempotent() {
		return &rpcResponse{Code: codeUnknown, Msg: fmt.Sprintf("the connection to leader %s broke before it answered (%v)", id, err)}, nil
	}
	return &rpcResponse{Code: codeUnavailable, Msg: fmt.Sprintf("leader %s at %s: %v", id, addr, err)}, nil
}
