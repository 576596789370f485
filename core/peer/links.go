package peer

import (
	"context"
	"sync"

	"github.com/fibrilgo/fibril/core"
)

// Links keeps one core.Link per peer node. A link is dialled on first use
// and replaced when the peer now advertises a different address (a
// restarted broker that moved); transports re-establish a dead connection
// on the next OpenStream themselves, so a link is never dropped for an
// error. Safe for concurrent use.
type Links struct {
	tr core.Transport

	mu     sync.Mutex
	links  map[core.NodeID]core.Link
	closed bool
}

// NewLinks returns an empty cache over tr.
func NewLinks(tr core.Transport) *Links {
	return &Links{tr: tr, links: make(map[core.NodeID]core.Link)}
}

// Get returns the link to peer, dialling it when there is none yet or
// when the cached one reaches another address.
func (l *Links) Get(ctx context.Context, peer core.Peer) (core.Link, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, core.Errorf(core.ErrClosed, "peer links are closed")
	}
	if link, ok := l.links[peer.ID]; ok {
		if link.Peer().Addr == peer.Addr {
			return link, nil
		}
		_ = link.Close()
		delete(l.links, peer.ID)
	}
	link, err := l.tr.Dial(ctx, peer)
	if err != nil {
		return nil, err
	}
	l.links[peer.ID] = link
	return link, nil
}

// Retain closes and drops the links to every node not in live (nodes that
// died or left), so a QUIC connection to a departed peer is not kept open.
func (l *Links) Retain(live map[core.NodeID]bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, link := range l.links {
		if !live[id] {
			_ = link.Close()
			delete(l.links, id)
		}
	}
}

// Close closes every link. The transport stays open (its owner closes it).
func (l *Links) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	for id, link := range l.links {
		_ = link.Close()
		delete(l.links, id)
	}
}
