package raft

import (
	"log/slog"
	"time"

	hraft "github.com/hashicorp/raft"
)

// peerReminderEvery is how often a peer that stays unreachable is
// mentioned again.
const peerReminderEvery = time.Minute

// peerWatch turns raft's heartbeat observations into what an operator
// needs about a peer this member cannot reach: one WARN line when it stops
// answering, a WARN reminder at most every `every` while it stays away
// (counting the failed heartbeats since the last line), and one INFO line
// when it answers again. raft's own lines about each failed RPC are at
// debug (peerDetail).
//
// Only the leader heartbeats, so only the leader reports. The facts come
// from raft's observer: a FailedHeartbeatObservation for each failed
// heartbeat (raft retries with a backoff capped at half the heartbeat
// timeout, so they keep coming while the peer is down) and a
// ResumedHeartbeatObservation at the first success after failures. Both
// are delivered without blocking raft, so one may be dropped; the watch
// stays right anyway: reminders are only written on a failure, so a lost
// resume never produces a false reminder, and a failure after more than
// `every` of silence starts a new outage instead of continuing a stale
// one. Losing the leadership ends this member's heartbeats, and with them
// any news about the peer: it says so once and forgets.
//
// Not safe for concurrent use: one goroutine feeds it.
type peerWatch struct {
	log    *slog.Logger
	self   hraft.ServerID
	every  time.Duration
	addrOf func(hraft.ServerID) string // the peer's address for the lines; may return ""
	down   map[hraft.ServerID]*peerOutage
}

// peerOutage is one peer's time away.
type peerOutage struct {
	since       time.Time // first failed heartbeat
	lastFailure time.Time
	lastLine    time.Time
	failures    int // failed heartbeats since lastLine
}

func newPeerWatch(log *slog.Logger, self hraft.ServerID, every time.Duration, addrOf func(hraft.ServerID) string) *peerWatch {
	return &peerWatch{log: log, self: self, every: every, addrOf: addrOf, down: map[hraft.ServerID]*peerOutage{}}
}

// handle takes one observation's data at now.
func (w *peerWatch) handle(data any, now time.Time) {
	switch d := data.(type) {
	case hraft.FailedHeartbeatObservation:
		w.failed(d.PeerID, d.LastContact, now)
	case hraft.ResumedHeartbeatObservation:
		if o := w.down[d.PeerID]; o != nil {
			delete(w.down, d.PeerID)
			w.log.Info("raft: a peer is reachable again", w.attrs(d.PeerID, "down_for", now.Sub(o.since).Round(time.Millisecond))...)
		}
	case hraft.LeaderObservation:
		if d.LeaderID == w.self {
			return
		}
		for id, o := range w.down {
			w.log.Info("raft: no longer the leader; the new leader reports on this unreachable peer",
				w.attrs(id, "down_for", now.Sub(o.since).Round(time.Millisecond))...)
		}
		clear(w.down)
	case hraft.PeerObservation:
		if d.Removed { // raft stops heartbeating it; its removal is logged already
			delete(w.down, d.Peer.ID)
		}
	}
}

func (w *peerWatch) failed(id hraft.ServerID, lastContact, now time.Time) {
	o := w.down[id]
	if o != nil && now.Sub(o.lastFailure) > w.every {
		o = nil // silence since: raft stopped trying, or a resume was lost
	}
	if o == nil {
		w.down[id] = &peerOutage{since: now, lastFailure: now, lastLine: now}
		var extra []any
		if !lastContact.IsZero() {
			extra = []any{"last_contact", now.Sub(lastContact).Round(time.Millisecond)}
		}
		w.log.Warn("raft: a peer is unreachable; raft keeps retrying", w.attrs(id, extra...)...)
		return
	}
	o.lastFailure = now
	o.failures++
	if now.Sub(o.lastLine) >= w.every {
		w.log.Warn("raft: a peer is still unreachable",
			w.attrs(id, "down_for", now.Sub(o.since).Round(time.Second), "failed_heartbeats", o.failures)...)
		o.lastLine, o.failures = now, 0
	}
}

// attrs names the peer (and its address when known), then extra.
func (w *peerWatch) attrs(id hraft.ServerID, extra ...any) []any {
	out := []any{"peer", string(id)}
	if w.addrOf != nil {
		if a := w.addrOf(id); a != "" {
			out = append(out, "addr", a)
		}
	}
	return append(out, extra...)
}

// watchPeers feeds the watch from raft's observer until the member
// closes. Its own channel and goroutine keep the heartbeat observations
// from crowding out the leader wake-ups that observe handles.
func (c *Coordinator) watchPeers(ch <-chan hraft.Observation) {
	w := newPeerWatch(c.log, hraft.ServerID(c.opts.NodeID), peerReminderEvery, c.peerAddr)
	for {
		select {
		case ob := <-ch:
			w.handle(ob.Data, time.Now())
			c.setUnreachable(w.down)
		case <-c.ctx.Done():
			return
		}
	}
}

// peerAddr is id's address in the raft configuration, "" if absent.
func (c *Coordinator) peerAddr(id hraft.ServerID) string {
	f := c.raft.GetConfiguration() // a copy; does not wait for raft's loop
	if f.Error() != nil {
		return ""
	}
	for _, s := range f.Configuration().Servers {
		if s.ID == id {
			return string(s.Address)
		}
	}
	return ""
}
