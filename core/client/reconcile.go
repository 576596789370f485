package client

import (
	"sort"

	"github.com/fibrilgo/fibril/core/wire"
)

// detachNote tells a partition subscription's supervisor why it lost its
// broker-side subscription.
type detachNote struct {
	ps       *partSub
	code     wire.Reason
	msg      string
	terminal bool // end the subscription with an error instead of re-subscribing
	refresh  bool // refresh the topology before re-subscribing (the owner may have moved)
}

// terminalReason classifies a docs/protocol.md#reason-codes reason code for a subscription that was
// closed: topic_deleted, lagged and server_error end it; every other code,
// unknown ones included, makes the supervisor re-subscribe.
func terminalReason(r wire.Reason) bool {
	switch r {
	case wire.ReasonTopicDeleted, wire.ReasonLagged, wire.ReasonServerError:
		return true
	}
	return false
}

// buildReconcile lists the live queue subscriptions of an endpoint for
// RECONCILE_CLIENT (wire.ReconcileClient): ReconcileSub puts auto_ack before prefetch
// (wire.ReconcileSub, the codec handles the order) and the cohort fields are absent
// (this client does not join exclusive cohorts). The list may be empty:
// the previous session had subscriptions, and an empty list makes the
// broker drop them (client_missing) instead of delivering to sub_ids this
// client no longer knows. It returns the sub_id → subscription map the
// verdicts are matched against.
func buildReconcile(policy wire.ReconcilePolicy, subs map[*partSub]struct{}) (*wire.ReconcileClient, map[uint64]*partSub) {
	rc := &wire.ReconcileClient{Policy: policy}
	sent := make(map[uint64]*partSub, len(subs))
	for ps := range subs {
		ps.mu.Lock()
		id, ended := ps.subID, ps.ended
		ps.mu.Unlock()
		if ended || ps.sub.stream != nil {
			continue // stream subscriptions are subscribed again, not reconciled (S-83)
		}
		sent[id] = ps
		rc.Subscriptions = append(rc.Subscriptions, wire.ReconcileSub{
			SubID:     id,
			Topic:     ps.sub.topic,
			Partition: ps.partition,
			Group:     ps.sub.group,
			AutoAck:   ps.sub.opts.AutoAck,
			Prefetch:  ps.sub.prefetch,
			// An exclusive subscription rejoins its cohort as the same member (S-96).
			ConsumerGroup:  optStr(ps.sub.opts.ConsumerGroup),
			ConsumerTarget: optU32(ps.sub.opts.ConsumerTarget),
			MemberID:       ps.sub.cl.memberIDFor(ps.sub.opts.ConsumerGroup != ""),
		})
	}
	sort.Slice(rc.Subscriptions, func(i, j int) bool { return rc.Subscriptions[i].SubID < rc.Subscriptions[j].SubID })
	return rc, sent
}

// applyReconcileLocked applies RECONCILE_RESULT verdicts (docs/protocol.md#reconcile) with
// ep.mu held: keep re-keys the subscription to server.sub_id (or keeps its
// id when the server view is absent) and installs it on the new
// connection; any other action detaches it with the entry's code (the
// supervisor re-subscribes unless the code is terminal). A subscription
// the result does not mention is closed as a server error (terminal).
// Entries without a client view (close_server_side) need nothing here.
// The returned notes must be delivered after ep.mu is released.
func (ep *endpoint) applyReconcileLocked(sent map[uint64]*partSub, res *wire.ReconcileResult) []detachNote {
	cl := ep.cl
	var notes []detachNote
	seen := make(map[*partSub]bool, len(sent))
	for _, e := range res.Entries {
		if !e.Client.Present {
			continue
		}
		ps := sent[e.Client.Value.SubID]
		if ps == nil || seen[ps] {
			cl.stats.protocolViolations.Add(1)
			cl.log.Warn("RECONCILE_RESULT entry for a subscription that was not listed (or listed twice)",
				"sub_id", e.Client.Value.SubID, "action", e.Action, "reason", e.Reason)
			continue
		}
		seen[ps] = true
		if _, live := ep.subs[ps]; !live {
			continue // released while the handshake ran
		}
		if e.Action == wire.ActionKeep {
			id := e.Client.Value.SubID
			if e.Server.Present {
				id = e.Server.Value.SubID
			}
			ps.mu.Lock()
			ps.subID = id
			ps.mu.Unlock()
			ep.byID[id] = ps
			continue
		}
		delete(ep.subs, ps)
		notes = append(notes, detachNote{
			ps:       ps,
			code:     e.Code,
			msg:      "reconcile: " + e.Action.String() + " (" + e.Reason + ")",
			terminal: terminalReason(e.Code),
		})
	}
	for _, ps := range sent {
		if seen[ps] {
			continue
		}
		if _, live := ep.subs[ps]; !live {
			continue
		}
		delete(ep.subs, ps)
		cl.stats.protocolViolations.Add(1)
		notes = append(notes, detachNote{
			ps:       ps,
			code:     wire.ReasonServerError,
			msg:      "subscription missing from RECONCILE_RESULT",
			terminal: true,
		})
	}
	return notes
}
