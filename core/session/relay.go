package session

import (
	"log/slog"

	"github.com/fibrilgo/fibril/core/forward"
	"github.com/fibrilgo/fibril/core/wire"
)

// relayPort is a Conn as the relay sees it (forward.ClientConn): its methods are
// the few things core/forward may ask of a client connection, kept off
// Conn's own method set.
type relayPort Conn

func (p *relayPort) conn() *Conn { return (*Conn)(p) }

func (p *relayPort) DeferReply() { p.conn().deferReply() }

func (p *relayPort) Answer(op wire.Op, reqID uint64, body wire.Encoder) {
	p.conn().enqueue(outFrame{op: op, reqID: reqID, slot: true, body: body})
}

func (p *relayPort) Confirm(reqID, offset uint64) {
	p.conn().enqueue(outFrame{op: wire.OpPublishOK, reqID: reqID, offset: offset, slot: true}) // inline: no body to allocate
}

func (p *relayPort) Push(op wire.Op, reqID uint64, body wire.Encoder, relayed int) {
	p.conn().enqueue(outFrame{op: op, reqID: reqID, body: body, relay: relayed})
}

func (p *relayPort) Drop(op wire.Op, reason string) { p.conn().drop(op, reason) }

func (p *relayPort) HasSubscription(topic string, group wire.Option[string], partition uint32) bool {
	return p.conn().sess.findSub(keyOf(topic, group, partition)) != nil
}

func (p *relayPort) Route(topic string, group wire.Option[string], partition uint32, publish bool, version uint64) forward.Target {
	rt := p.conn().route(topic, group, partition, publish, version)
	return forward.Target{Owner: rt.Forward, Redirect: rt.Redirect}
}

// Client is any goroutine's view: the reader's published identity.
func (p *relayPort) Client() forward.ClientInfo {
	c := p.conn()
	cl := forward.ClientInfo{ConnID: c.id, Remote: c.remote}
	if id := c.identity.Load(); id != nil {
		cl.User, cl.ClientID = id.user, id.clientID
	}
	return cl
}

func (p *relayPort) Logger() *slog.Logger { return p.conn().log }

func (p *relayPort) Opened() <-chan struct{} { return p.conn().opened }
