package forward

import (
	"time"

	"github.com/fibrilgo/fibril/core"
	upclient "github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/wire"
)

// The client's answer to a relayed request, from the owner's answer or
// from why there is none (core/forward/README.md#failures).

// answerForwarded turns the owner's answer to a forwarded request into the
// client's (any goroutine). reply is the frame to relay; err says why
// there is none (NotWritten: 503; otherwise the outcome is unknown).
func (r *Relay) answerForwarded(op wire.Op, reqID uint64, owner core.NodeID, ref func() Target, f upclient.Frame, err error) {
	m := r.gw.m
	outcome, code := "ok", uint16(0)
	defer func() {
		m.Requests.WithLabelValues(op.String(), outcome).Inc()
		if code != 0 {
			r.logForwardFailure(op, reqID, owner, outcome, code, err)
		}
	}()
	if err == nil {
		m.BytesIn.Add(float64(wire.HeaderSize + len(f.Body)))
	}
	switch {
	case err != nil && upclient.NotWritten(err):
		outcome, code = "not_sent", wire.CodeUnavailable
		r.answerError(reqID, code, notSent(err))
	case err != nil:
		var msg string
		code, msg = wire.CodeOutcomeUnknown, "the upstream session to the partition's owner was lost after the request was sent; its outcome is unknown: "+err.Error()
		outcome = "outcome_unknown"
		if op != wire.OpPublish && op != wire.OpPublishDelayed {
			// A SUBSCRIBE dies with the upstream session on the owner.
			code, msg = wire.CodeUnavailable, "the upstream session to the partition's owner was lost: "+err.Error()+"; retry"
			outcome = "lost"
		}
		r.answerError(reqID, code, msg)
	case f.Op == wire.OpRedirect:
		outcome = "moved"
		// Never relayed raw (core/forward/README.md#upstream-sessions): the owner's view moved on; answer
		// from this broker's own view, which follows the cluster.
		if rt := ref(); rt.Redirect != nil {
			r.c.Answer(wire.OpRedirect, reqID, rt.Redirect)
			return
		}
		code = wire.CodeUnavailable
		r.answerError(reqID, code, "the partition's ownership is moving; retry")
	case f.Op == wire.OpPublishOK:
		var ok wire.PublishOK
		if derr := ok.Decode(f.Body); derr != nil {
			outcome, code = "error", wire.CodeOutcomeUnknown
			r.answerError(reqID, code, "the owner's PUBLISH_OK is malformed: "+derr.Error())
			return
		}
		r.c.Confirm(reqID, ok.Offset) // the owner's offset
	default:
		if f.Op == wire.OpError {
			outcome = "error"
			var eb wire.ErrorBody
			if eb.Decode(f.Body) == nil {
				code = eb.Code
			}
		}
		r.c.Answer(f.Op, reqID, rawBody(append([]byte(nil), f.Body...)))
	}
}

// logForwardFailure logs a forwarded request that failed, with the code the
// client got; at most one line a second per connection, counting the ones
// it left out (an owner that dies with a full window fails hundreds at
// once).
func (r *Relay) logForwardFailure(op wire.Op, reqID uint64, owner core.NodeID, outcome string, code uint16, err error) {
	ok, skipped := r.failLog.Allow(struct{}{}, time.Now())
	if !ok {
		return
	}
	args := []any{"op", op.String(), "request_id", reqID, "owner", string(owner), "outcome", outcome, "code", code, "not_logged_before", skipped}
	if err != nil {
		args = append(args, "err", err)
	}
	r.c.Logger().Info("forwarded request failed", args...)
}

// replyError answers the request being handled with ERROR at once (reader
// goroutine): its slot goes to the answer.
func (r *Relay) replyError(reqID uint64, code uint16, msg string) {
	r.c.DeferReply()
	r.answerError(reqID, code, msg)
}
