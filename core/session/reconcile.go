package session

import (
	"cmp"
	"slices"

	"github.com/fibrilgo/fibril/core/forward"
	"github.com/fibrilgo/fibril/core/queue"
	"github.com/fibrilgo/fibril/core/wire"
)

// handleReconcile answers RECONCILE_CLIENT (docs/protocol.md#reconcile, S-108…S-110). It is
// accepted on any session, resumed or not: every SDK sends it after any
// reconnect that had subscriptions. Writing the answer ends the quiet
// window (docs/protocol.md#quiet-window).
func (c *Conn) handleReconcile(id uint64, body []byte) {
	var req wire.ReconcileClient
	if err := req.Decode(body); err != nil {
		c.slotPending = false
		c.enqueue(outFrame{op: wire.OpError, reqID: id, slot: true, opensWindow: true,
			body: &wire.ErrorBody{Code: wire.CodeBadRequest, Message: "malformed frame: " + err.Error()}})
		return
	}
	c.srv.opts.Metrics.ReconcileRequests.Inc()
	fwd := verdictLog{m: c.srv.opts.Metrics}
	local := c.relay.Reconcile(req.Subscriptions, func(cv, sv wire.Option[wire.ReconcileSub], v forward.Verdict) {
		fwd.add(cv, sv, relayVerdicts[v])
	})
	res, restored := c.sess.reconcile(req.Policy, local)
	if len(fwd.entries) > 0 {
		res.Entries = append(res.Entries, fwd.entries...)
		slices.SortStableFunc(res.Entries, compareEntries)
	}
	c.slotPending = false
	c.enqueue(outFrame{op: wire.OpReconcileResult, reqID: id, slot: true, opensWindow: true, body: res})
	for _, sub := range restored { // deliveries only after the answer that names them
		c.sess.announce(sub)
	}
	c.sess.saveSkeleton()
}

// verdict labels: action, reason code and text, and the metric outcome.
type verdict struct {
	action  wire.ReconcileAction
	code    wire.Reason
	outcome string
}

var (
	vMatched       = verdict{wire.ActionKeep, wire.ReasonMatched, "kept"}
	vIDChanged     = verdict{wire.ActionKeep, wire.ReasonServerIDChanged, "kept"}
	vRestored      = verdict{wire.ActionKeep, wire.ReasonServerRestored, "restored"}
	vMismatch      = verdict{wire.ActionCloseClientSide, wire.ReasonServerMismatch, "mismatched"}
	vRestoreFailed = verdict{wire.ActionCloseClientSide, wire.ReasonServerRestoreFailed, "restore_failed"}
	vMissing       = verdict{wire.ActionCloseClientSide, wire.ReasonServerMissing, "client_closed"}
	vRecreate      = verdict{wire.ActionRecreateClientSide, wire.ReasonRecreate, "recreated"}
	vClientMissing = verdict{wire.ActionCloseServerSide, wire.ReasonClientMissing, "server_dropped"}
)

// relayVerdicts are the relay's reconcile verdicts (forward.Relay.Reconcile)
// as RECONCILE_RESULT entries.
var relayVerdicts = map[forward.Verdict]verdict{
	forward.Matched:       vMatched,
	forward.IDChanged:     vIDChanged,
	forward.Missing:       vMissing,
	forward.Recreate:      vRecreate,
	forward.ClientMissing: vClientMissing,
}

// verdictLog collects RECONCILE_RESULT entries and counts each verdict's
// outcome; the local reconcile and the relay's (forward.Relay.Reconcile)
// both record through it.
type verdictLog struct {
	m       *Metrics
	entries []wire.ReconcileEntry
}

func (l *verdictLog) add(cv, sv wire.Option[wire.ReconcileSub], v verdict) {
	l.entries = append(l.entries, wire.ReconcileEntry{Client: cv, Server: sv, Action: v.action, Code: v.code, Reason: v.code.String()})
	l.m.ReconcileOutcomes.WithLabelValues(v.outcome).Inc()
}

// reconcile applies the reconcile algorithm (docs/protocol.md#reconcile) and returns the answer plus the
// subscriptions it recreated (announced by the caller once the answer is
// queued).
func (s *Session) reconcile(policy wire.ReconcilePolicy, client []wire.ReconcileSub) (*wire.ReconcileResult, []*subscription) {
	s.transition.Lock()
	defer s.transition.Unlock()
	log := verdictLog{m: s.srv.opts.Metrics}
	add := log.add
	listed := make(map[subKey]bool, len(client))
	var drop, restored []*subscription
	for _, cs := range client {
		key := keyOf(cs.Topic, cs.Group, cs.Partition)
		listed[key] = true
		s.mu.Lock()
		sub := s.subs[key]
		s.mu.Unlock()
		switch {
		case sub != nil && sub.req.AutoAck == cs.AutoAck && sub.req.Prefetch == cs.Prefetch:
			v := vMatched
			if sub.id != cs.SubID {
				v = vIDChanged // the SDK re-keys to the broker's id
			}
			add(wire.Some(cs), wire.Some(sub.view()), v)
		case sub != nil:
			// The client closes its side; unlike upstream, the broker drops
			// its own subscription too, so nothing keeps leasing messages
			// no one will settle (docs/protocol.md#reconcile Recommendation).
			add(wire.Some(cs), wire.Some(sub.view()), vMismatch)
			drop = append(drop, sub)
		case s.routedElsewhere(cs):
			// Coordinated mode: the partition is served by another broker
			// (or nowhere right now); restoring it here would subscribe to
			// a log this broker does not serve.
			add(wire.Some(cs), wire.Option[wire.ReconcileSub]{}, vMissing)
		case policy == wire.ReconcileRestore:
			nsub, err := s.subscribeLocked(reconcileToSubscribe(cs))
			if err != nil {
				s.log.Info("reconcile could not restore a subscription", "topic", cs.Topic, "partition", cs.Partition, "err", err)
				add(wire.Some(cs), wire.Option[wire.ReconcileSub]{}, vRestoreFailed)
				continue
			}
			restored = append(restored, nsub)
			add(wire.Some(cs), wire.Some(nsub.view()), vRestored)
		case !cs.AutoAck && s.ownsPartition(cs):
			add(wire.Some(cs), wire.Option[wire.ReconcileSub]{}, vRecreate)
		default:
			add(wire.Some(cs), wire.Option[wire.ReconcileSub]{}, vMissing)
		}
	}
	s.mu.Lock()
	for key, sub := range s.subs {
		if !listed[key] && !sub.stream { // stream subscriptions are not reconciled (S-83)
			drop = append(drop, sub)
			add(wire.Option[wire.ReconcileSub]{}, wire.Some(sub.view()), vClientMissing)
		}
	}
	s.mu.Unlock()
	s.unsubscribeLocked(drop) // S-110: their unsettled deliveries return to Ready
	res := &wire.ReconcileResult{Entries: log.entries}
	slices.SortStableFunc(res.Entries, compareEntries)
	return res, restored
}

// ownsPartition: in standalone mode this broker owns every queue partition
// it can serve.
// routedElsewhere reports, in coordinated mode, that this broker does not
// serve the partition of cs now (another broker owns it, or nobody can
// serve it yet), so it must not be restored or recreated here.
func (s *Session) routedElsewhere(cs wire.ReconcileSub) bool {
	r := s.srv.opts.Router
	if r == nil {
		return false
	}
	return !r.Route(partitionRef(cs.Topic, cs.Group, cs.Partition), false, 0, false).Serve
}

// ownsPartition reports whether the local engine has the partition.
func (s *Session) ownsPartition(cs wire.ReconcileSub) bool {
	_, err := s.srv.opts.Queues.Partition(queue.Key{Topic: cs.Topic, Group: cs.Group}, cs.Partition)
	return err == nil
}

func reconcileToSubscribe(cs wire.ReconcileSub) wire.Subscribe {
	return wire.Subscribe{Topic: cs.Topic, Partition: cs.Partition, Group: cs.Group, Prefetch: cs.Prefetch,
		AutoAck: cs.AutoAck, ConsumerGroup: cs.ConsumerGroup, ConsumerTarget: cs.ConsumerTarget, MemberID: cs.MemberID}
}

// compareEntries orders entries by (group, topic, sub_id) of the client
// view, or the server view for server-only entries; an absent group sorts
// before any present one and strings compare bytewise (docs/protocol.md#reconcile).
func compareEntries(a, b wire.ReconcileEntry) int {
	va, vb := entryView(a), entryView(b)
	if c := compareGroup(va.Group, vb.Group); c != 0 {
		return c
	}
	if c := cmp.Compare(va.Topic, vb.Topic); c != 0 {
		return c
	}
	return cmp.Compare(va.SubID, vb.SubID)
}

func entryView(e wire.ReconcileEntry) wire.ReconcileSub {
	if v, ok := e.Client.Get(); ok {
		return v
	}
	v, _ := e.Server.Get()
	return v
}

func compareGroup(a, b wire.Option[string]) int {
	switch {
	case !a.Present && !b.Present:
		return 0
	case !a.Present:
		return -1
	case !b.Present:
		return 1
	}
	return cmp.Compare(a.Value, b.Value)
}
