package raft

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/fibrilgo/fibril/core"
)

// RPC operations on the member-to-member channel. Everything but ping
// and join is answered only by the leader; a follower answers
// not_leader with a hint, and the caller goes to the leader itself
// (forwarding is one hop, never a chain).
const (
	rpcPing  = "ping"  // is this node up, and does it already hold raft state?
	rpcApply = "apply" // commit a command
	rpcRenew = "renew" // extend a lease (not a log write)
	rpcRead  = "read"  // linearizable Get or List
	rpcJoin  = "join"  // add (or fix) a member in the configuration
	// The operator's membership calls (members.go).
	rpcMembers = "members" // the configuration with the leader's view of each member
	rpcChange  = "change"  // remove, promote or demote a member
)

type rpcRequest struct {
	Op string `json:"op"`
	// Timeout is what is left of the caller's deadline, so the leader
	// gives up when the caller has.
	Timeout time.Duration `json:"timeout,omitempty"`
	Cmd     *command      `json:"cmd,omitempty"`
	Lease   string        `json:"lease,omitempty"`
	Key     string        `json:"key,omitempty"`
	List    bool          `json:"list,omitempty"`
	// join
	ID    string `json:"id,omitempty"`
	Addr  string `json:"addr,omitempty"`
	Voter bool   `json:"voter,omitempty"`
	// change: a core.ConsensusChange with ID (and Addr to add a member)
	Change string `json:"change,omitempty"`
}

type rpcResponse struct {
	Code       string    `json:"code,omitempty"`
	Msg        string    `json:"msg,omitempty"`
	Result     *result   `json:"result,omitempty"`
	KVs        []core.KV `json:"kvs,omitempty"`
	Index      uint64    `json:"index,omitempty"`
	LeaderID   string    `json:"leader_id,omitempty"`
	LeaderAddr string    `json:"leader_addr,omitempty"`
	HasState   bool      `json:"has_state,omitempty"`
	// TTL is a renewed lease's TTL (so AttachLease learns it).
	TTL time.Duration `json:"ttl,omitempty"`
	// Members answers rpcMembers.
	Members []core.ConsensusMember `json:"members,omitempty"`
}

// idempotent requests may be resent after a connection broke mid-call;
// an apply may not (it might have committed).
func (r *rpcRequest) idempotent() bool { return r.Op != rpcApply }

// maxFrame bounds one RPC message. Coordination values are small; this
// only stops a corrupt length from allocating gigabytes.
const maxFrame = 32 << 20

func writeFrame(w io.Writer, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(body) > maxFrame {
		return fmt.Errorf("rpc message of %d bytes exceeds %d", len(body), maxFrame)
	}
	buf := make([]byte, 4, 4+len(body))
	binary.BigEndian.PutUint32(buf, uint32(len(body)))
	_, err = w.Write(append(buf, body...))
	return err
}

func readFrame(r io.Reader, v any) error {
	var l [4]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(l[:])
	if n > maxFrame {
		return fmt.Errorf("rpc message of %d bytes exceeds %d", n, maxFrame)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return err
	}
	return json.Unmarshal(body, v)
}

// serveRPC answers requests on one authenticated connection, one at a
// time, until it closes or the Coordinator does.
func (c *Coordinator) serveRPC(conn net.Conn, peer string) {
	stop := context.AfterFunc(c.ctx, func() { _ = conn.Close() })
	defer stop()
	r := bufio.NewReader(conn)
	for {
		var req rpcRequest
		if err := readFrame(r, &req); err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && c.ctx.Err() == nil {
				c.log.Debug("raft: rpc connection ended", "peer", peer, "err", err)
			}
			return
		}
		ctx, cancel := c.ctx, context.CancelFunc(func() {})
		if req.Timeout > 0 {
			ctx, cancel = context.WithTimeout(c.ctx, req.Timeout)
		}
		resp := c.handle(ctx, &req)
		cancel()
		if err := writeFrame(conn, resp); err != nil {
			return
		}
	}
}

// rpcPool keeps idle authenticated RPC connections per peer, so a
// forwarded write does not pay a TCP + TLS + preamble round each time.
type rpcPool struct {
	net  *network
	mu   sync.Mutex
	idle map[string][]*rpcConn // by node id
	shut bool
}

type rpcConn struct {
	conn net.Conn
	r    *bufio.Reader
	addr string
}

const maxIdlePerPeer = 4

func newRPCPool(n *network) *rpcPool {
	return &rpcPool{net: n, idle: map[string][]*rpcConn{}}
}

func (p *rpcPool) get(ctx context.Context, id, addr string) (*rpcConn, error) {
	for {
		p.mu.Lock()
		list := p.idle[id]
		if len(list) == 0 {
			p.mu.Unlock()
			break
		}
		rc := list[len(list)-1]
		p.idle[id] = list[:len(list)-1]
		p.mu.Unlock()
		if rc.addr == addr && rc.alive() {
			return rc, nil
		}
		_ = rc.conn.Close()
	}
	conn, _, err := p.net.dial(ctx, addr, kindRPC, id)
	if err != nil {
		return nil, err
	}
	return &rpcConn{conn: conn, r: bufio.NewReader(conn), addr: addr}, nil
}

// alive reports whether an idle connection is still open: the peer sends
// nothing unasked, so anything readable (an EOF included) means it hung
// up. This keeps a stale pooled connection from turning a write into an
// "outcome unknown".
func (rc *rpcConn) alive() bool {
	_ = rc.conn.SetReadDeadline(time.Now().Add(time.Millisecond))
	_, err := rc.r.Peek(1)
	_ = rc.conn.SetReadDeadline(time.Time{})
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func (p *rpcPool) put(id string, rc *rpcConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shut || len(p.idle[id]) >= maxIdlePerPeer {
		_ = rc.conn.Close()
		return
	}
	p.idle[id] = append(p.idle[id], rc)
}

func (p *rpcPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.shut = true
	for id, list := range p.idle {
		for _, rc := range list {
			_ = rc.conn.Close()
		}
		delete(p.idle, id)
	}
}

// call sends one request to node id at addr. sent reports whether the
// request may have reached the peer (so a failed apply's outcome is
// unknown).
func (p *rpcPool) call(ctx context.Context, id, addr string, req *rpcRequest) (resp *rpcResponse, sent bool, err error) {
	rc, err := p.get(ctx, id, addr)
	if err != nil {
		return nil, false, err
	}
	r := *req
	if dl, ok := ctx.Deadline(); ok {
		r.Timeout = time.Until(dl)
		_ = rc.conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = rc.conn.SetDeadline(time.Unix(1, 0)) })
	if err := writeFrame(rc.conn, &r); err != nil {
		stop()
		_ = rc.conn.Close()
		return nil, true, err
	}
	var out rpcResponse
	err = readFrame(rc.r, &out)
	stopped := stop()
	if err != nil {
		_ = rc.conn.Close()
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return nil, true, err
	}
	if !stopped { // the cancellation poisoned the deadline
		_ = rc.conn.Close()
	} else {
		_ = rc.conn.SetDeadline(time.Time{})
		p.put(id, rc)
	}
	return &out, true, nil
}
