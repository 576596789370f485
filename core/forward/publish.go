package forward

import (
	"sync"
	"time"

	"github.com/fibrilgo/fibril/core"
	upclient "github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/wire"
)

// Publish relays a PUBLISH / PUBLISH_DELAYED to owner (reader
// goroutine). The client's PUBLISH_OK is the owner's, with the owner's
// offset, or an error: 503 when the request never reached the owner, 504
// when it did and the answer was lost.
func (r *Relay) Publish(h wire.FrameHeader, body []byte, req PublishRef, owner core.NodeID) {
	if req.Confirm {
		r.c.DeferReply()
	}
	r.withUpstream(owner, body, func(u *upstream, body []byte, err error) { r.relayPublish(h, body, req, owner, u, err) })
}

// relayPublish is Publish once the upstream session is open (u) or could
// not be (err).
func (r *Relay) relayPublish(h wire.FrameHeader, body []byte, req PublishRef, owner core.NodeID, u *upstream, err error) {
	if err != nil {
		if req.Confirm {
			r.answerError(h.RequestID, core.Code(err), err.Error())
		} else {
			r.c.Drop(h.Op, "no_upstream")
		}
		return
	}
	m := r.gw.m
	m.BytesOut.Add(float64(wire.HeaderSize + len(body)))
	if !req.Confirm {
		u.lastUse.Store(time.Now().UnixNano())
		if err := u.link().Conn.Send(h.Op, 0, rawBody(body)); err != nil {
			r.c.Drop(h.Op, "upstream_lost")
			m.Requests.WithLabelValues(h.Op.String(), "dropped").Inc()
			return
		}
		m.Requests.WithLabelValues(h.Op.String(), "sent").Inc()
		return
	}
	reqID, op := h.RequestID, h.Op
	n := int64(len(body))
	if !r.gw.acquireInflight(n, r.gw.limits()) {
		m.Rejected.WithLabelValues("max_inflight_forward_bytes").Inc()
		r.answerError(reqID, wire.CodeUnavailable, "routing.max_inflight_forward_bytes is reached on this broker; retry")
		return
	}
	topic, group, partition, version := req.Topic, req.Group, req.Partition, req.Version
	reroute := func() Target { return r.c.Route(topic, group, partition, true, version) }
	kept := keepBody(body) // for the one re-send after an ownership move
	start := time.Now()
	err = u.call(start, op, rawBody(body), func(f upclient.Frame, err error) {
		if err == nil && f.Op == wire.OpRedirect {
			// The owner no longer owns it (core/forward/README.md#upstream-sessions): a new private owner
			// in this broker's view gets one more attempt, which keeps the
			// bytes reserved for this publish until its own answer.
			if rt := reroute(); rt.Owner != "" && rt.Owner != owner {
				m.Requests.WithLabelValues(op.String(), "moved").Inc()
				go func() {
					r.resendPublish(op, reqID, *kept, n, rt.Owner, reroute, start)
					releaseBody(kept)
				}()
				return
			}
		}
		r.gw.releaseInflight(n)
		releaseBody(kept)
		r.confirmed(f, err, start)
		r.answerForwarded(op, reqID, u.owner, reroute, f, err)
	})
	if err != nil {
		releaseBody(kept)
		r.gw.releaseInflight(n)
		m.Requests.WithLabelValues(op.String(), "not_sent").Inc()
		r.answerError(reqID, wire.CodeUnavailable, notSent(err))
	}
}

// keptBodies recycles the copies keepBody makes: a forwarded confirmed
// publish keeps its body until the owner answers, for the one re-send
// after a move, and a relay at 100k messages a second should not hand each
// copy to the garbage collector.
var keptBodies sync.Pool // of *[]byte

// maxKeptPooled is the largest copy keptBodies takes back.
const maxKeptPooled = 64 << 10

// keepBody copies body into a recycled buffer (release with releaseBody
// once nothing reads it: the upstream writer copies what it sends).
func keepBody(body []byte) *[]byte {
	b, _ := keptBodies.Get().(*[]byte)
	if b == nil {
		b = new([]byte)
	}
	*b = append((*b)[:0], body...)
	return b
}

func releaseBody(b *[]byte) {
	if cap(*b) <= maxKeptPooled {
		keptBodies.Put(b)
	}
}

// confirmed counts a relayed PUBLISH_OK.
func (r *Relay) confirmed(f upclient.Frame, err error, start time.Time) {
	if err == nil && f.Op == wire.OpPublishOK {
		took := time.Since(start)
		r.gw.m.Confirms.Inc()
		r.gw.m.ConfirmLatency.Add(float64(took.Microseconds()))
		r.gw.m.ConfirmSeconds.Observe(took.Seconds())
	}
}

// resendPublish is the one more attempt of a confirmed publish whose owner
// answered REDIRECT while this broker's view names another private owner
// (core/forward/README.md#upstream-sessions). Its answer is final: a second move answers 503, and the
// client retries. The n bytes the first send reserved under
// routing.max_inflight_forward_bytes stay reserved until that answer (the
// body is still held, and the request is still in flight).
func (r *Relay) resendPublish(op wire.Op, reqID uint64, body []byte, n int64, owner core.NodeID, reroute func() Target, start time.Time) {
	u, err := r.upstreamFor(owner)
	if err != nil {
		r.gw.releaseInflight(n)
		r.answerError(reqID, core.Code(err), err.Error())
		return
	}
	defer u.pinned.Add(-1)
	err = u.call(time.Now(), op, rawBody(body), func(f upclient.Frame, err error) {
		r.gw.releaseInflight(n)
		r.confirmed(f, err, start)
		r.answerForwarded(op, reqID, u.owner, reroute, f, err)
	})
	if err != nil {
		r.gw.releaseInflight(n)
		r.answerError(reqID, wire.CodeUnavailable, notSent(err))
	}
}
