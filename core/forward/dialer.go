package forward

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/fibrilgo/fibril/core"
	upclient "github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/peer"
	"github.com/fibrilgo/fibril/core/wire"
)

// PeerDialer opens upstream sessions over the inter-broker transport: a
// stream on the link to the owner's peer address, HELLO, AUTH as @node,
// FORWARDED_SESSION (FFS2, else FFS1) naming this node as the origin.
type PeerDialer struct {
	Login peer.Login  // this node and the cluster secret
	Links *peer.Links // one link per peer
	// Lookup returns the owner as this broker's cluster view has it; ok is
	// false when the owner is not live there or advertises no peer address.
	Lookup func(owner core.NodeID) (p core.Peer, ok bool)
	Logger *slog.Logger
}

// Dial is a Dialer.
func (d PeerDialer) Dial(ctx context.Context, owner core.NodeID, fs wire.ForwardedSession, resume *wire.ResumeIdentity, onPush func(upclient.Frame)) (Upstream, error) {
	p, ok := d.Lookup(owner)
	if !ok {
		return Upstream{}, fmt.Errorf("%w: owner %s is not live in this broker's view (%w)", core.ErrPeerRefused, owner, ErrOwnerNotLive)
	}
	link, err := d.Links.Get(ctx, p)
	if err != nil {
		return Upstream{}, err
	}
	conn, stream, err := d.Login.DialResume(ctx, link, 0, resume, onPush)
	if err != nil {
		if !errors.Is(err, core.ErrPeerRefused) {
			err = core.Errorf(core.ErrPeerRefused, "upstream handshake with %s failed: %v", owner, err)
		}
		return Upstream{}, err
	}
	fs.OriginNodeID = string(d.Login.Self)
	// Also on a resumed session: the owner takes it again from the same
	// origin, and a session that was not resumed needs it.
	if _, err := peer.Forwarded(ctx, conn, fs); err != nil {
		_ = conn.Close()
		d.Logger.Debug("FORWARDED_SESSION refused", "owner", string(owner), "err", err) // the gateway warns, rate-limited
		return Upstream{}, err
	}
	return Upstream{Conn: conn, Abort: func() {
		_ = stream.Abort()
		conn.Abort(errUpstreamAborted)
	}}, nil
}

var errUpstreamAborted = errors.New("upstream session aborted by the gateway")

// ErrOwnerNotLive is wrapped by a Dialer's error when the owner holds no
// live lease in this broker's view: a session of its cannot be resumed.
var ErrOwnerNotLive = errors.New("the owner is not live")
