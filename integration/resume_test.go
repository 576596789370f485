package integration

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/testkit"
)

// TestResumeAfterNetworkCut: a client whose socket is cut resumes its
// session within the reconnect grace (docs/protocol.md#resume `resumed`, S-101, S-102,
// S-104) and keeps its leases. While the socket is gone the session is
// dormant: messages published meanwhile wait (S-56) and are delivered
// after the resume without breaking the client's strict handshake (WIRE
// the quiet window, docs/protocol.md#quiet-window). A delivery received before the cut is acked after
// the reconnect and honoured (S-62); nothing is redelivered meanwhile. A
// graceful restart then brings back exactly the one delivery never acked
// (S-25, S-52).
func TestResumeAfterNetworkCut(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "--runtime_seed.connection.reconnect_grace_ms=30000")
	px := newProxy(t, b.Addr)
	c := newClient(t, px.Addr(), func(o *client.Options) { o.DialTimeout = proxyHold })
	pub := newClient(t, b.Addr)
	const topic = "blip"
	for i := range 3 {
		if off := publish(t, c, topic, client.Message{Payload: []byte(fmt.Sprint("m", i))}); off != uint64(i) {
			t.Fatalf("offset %d, want %d", off, i)
		}
	}
	sub := subscribe(t, c, topic, client.SubscribeOptions{Prefetch: 4})
	var ds []*client.Delivery
	for i := range 3 {
		d := next(t, sub, waitTimeout)
		if d.Offset != uint64(i) {
			t.Fatalf("delivery %d: offset %d", i, d.Offset)
		}
		ds = append(ds, d)
	}
	ack(t, ds[0])
	barrier(t, c)

	px.SetTarget("") // the reconnect waits in the proxy
	if n := px.Cut(); n != 1 {
		t.Fatalf("proxy cut %d connections, want 1", n)
	}
	testkit.Eventually(t, waitTimeout, "the broker to hold the session dormant", func() bool {
		return metric(t, b, "fibril_sessions_dormant") == 1
	})
	// Published while the session is dormant: delivered after the resume.
	off3 := publish(t, pub, topic, client.Message{Payload: []byte("m3")})
	off4 := publish(t, pub, topic, client.Message{Payload: []byte("m4")})
	px.SetTarget(b.Addr)
	testkit.Eventually(t, waitTimeout, "the client to reconnect", func() bool { return c.Stats().Reconnects == 1 })

	// The session was resumed: the tag from before the cut still settles
	// (after any other outcome the client refuses it with
	// ErrStaleDelivery, docs/protocol.md#resume).
	if err := ds[1].Ack(ctxT(t, opTimeout)); err != nil {
		t.Fatalf("ack of a pre-cut delivery after the resume: %v", err)
	}
	// The subscription keeps delivering where it was: the messages
	// published meanwhile, and no pre-cut delivery put back.
	for _, want := range []uint64{off3, off4} {
		d := next(t, sub, waitTimeout)
		if d.Offset != want {
			t.Fatalf("after the resume: delivery offset %d %q, want %d", d.Offset, d.Payload, want)
		}
		ack(t, d)
	}
	barrier(t, c)
	expectNone(t, sub, 300*time.Millisecond)

	st := c.Stats()
	if st.Reconnects != 1 || st.StaleSettles != 0 || st.PrefetchViolations != 0 || st.ProtocolViolations != 0 {
		t.Fatalf("client stats after the resume: %+v", st)
	}
	m := metrics(t, b)
	if got := m["fibril_tcp_resume_accepted_total"]; got != 1 {
		t.Fatalf("fibril_tcp_resume_accepted_total = %v, want 1 (one resume, one handshake)", got)
	}
	if got := m["fibril_sessions_dormant"]; got != 0 {
		t.Fatalf("fibril_sessions_dormant = %v after the resume", got)
	}
	c.Close()
	pub.Close()

	// Only ds[2] was never acked: after a restart it alone comes back.
	b.stop()
	b2 := b.restart()
	c2 := newClient(t, b2.Addr)
	sub2 := subscribe(t, c2, topic, client.SubscribeOptions{Prefetch: 4})
	sentinel := publish(t, c2, topic, client.Message{Payload: []byte("sentinel")})
	for _, want := range []uint64{ds[2].Offset, sentinel} {
		d := next(t, sub2, waitTimeout)
		if d.Offset != want {
			t.Fatalf("after restart: delivery offset %d %q, want %d (only the unacked message and the sentinel)", d.Offset, d.Payload, want)
		}
		ack(t, d)
	}
	expectNone(t, sub2, 300*time.Millisecond)
}

// TestReconcileAfterRestart: a consumer whose broker restarts in place
// (graceful stop, start on the same data directory, reached through the
// same proxy address) resumes its session `resumed_after_restart` from the
// skeleton (S-106, S-107) and reconciles its subscription (docs/protocol.md#reconcile,
// S-108, S-109): policy restore gets `server_restored` and keeps the
// consumer; policy conservative gets `recreate` and the client
// re-subscribes. Either way the deliveries from before the restart are
// stale (ErrStaleDelivery, docs/protocol.md#resume), the unacked messages are
// redelivered (S-52), the consumer keeps receiving, and nothing
// acknowledged comes back (S-25).
func TestReconcileAfterRestart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		policy  client.ReconcilePolicy
		outcome string
	}{
		{"restore", client.ReconcileRestore, "restored"},
		{"conservative", client.ReconcileConservative, "recreated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := startBroker(t)
			px := newProxy(t, b.Addr)
			c := newClient(t, px.Addr(), func(o *client.Options) {
				o.ReconcilePolicy = tc.policy
				o.DialTimeout = proxyHold // the reconnect waits in the proxy while the broker restarts
			})
			const topic = "steady"
			if _, err := c.DeclareQueue(ctxT(t, opTimeout), client.QueueSpec{Topic: topic, Partitions: 1}); err != nil {
				t.Fatal(err)
			}
			for i := range 6 {
				publish(t, c, topic, client.Message{Payload: []byte(fmt.Sprint("m", i))})
			}
			sub := subscribe(t, c, topic, client.SubscribeOptions{Prefetch: 8})
			var held []*client.Delivery
			for i := range 6 {
				d := next(t, sub, waitTimeout)
				if d.Offset != uint64(i) {
					t.Fatalf("delivery %d: offset %d", i, d.Offset)
				}
				if i < 3 {
					ack(t, d)
				} else {
					held = append(held, d)
				}
			}
			barrier(t, c)

			px.SetTarget("") // the client's reconnect waits here
			b.stop()
			b2 := b.restart()
			px.SetTarget(b2.Addr)

			// Redelivered after the restart: exactly the unacked 3, 4, 5,
			// then the consumer keeps receiving new messages.
			seen := map[uint64]bool{}
			for _, want := range []uint64{3, 4, 5} {
				d := next(t, sub, waitTimeout)
				if d.Offset != want || string(d.Payload) != fmt.Sprint("m", want) {
					t.Fatalf("after restart: delivery offset %d %q, want %d (only unacked messages come back)", d.Offset, d.Payload, want)
				}
				seen[d.Offset] = true
				ack(t, d)
			}
			for _, d := range held {
				if err := d.Ack(ctxT(t, opTimeout)); !errors.Is(err, client.ErrStaleDelivery) {
					t.Fatalf("ack of a delivery from before the restart: %v, want ErrStaleDelivery", err)
				}
			}
			off := publish(t, c, topic, client.Message{Payload: []byte("m6")})
			if d := next(t, sub, waitTimeout); d.Offset != off || off != 6 {
				t.Fatalf("new message after restart: delivery %d, published at %d, want 6", d.Offset, off)
			} else {
				ack(t, d)
			}
			barrier(t, c)
			expectNone(t, sub, 300*time.Millisecond)

			if st := c.Stats(); st.Reconnects < 1 || st.StaleSettles != 3 {
				t.Fatalf("client stats: %+v (want a reconnect and 3 stale settles)", st)
			}
			m := metrics(t, b2)
			if got := m["fibril_tcp_resume_accepted_total"]; got != 1 {
				t.Errorf("fibril_tcp_resume_accepted_total = %v, want 1 (resumed_after_restart)", got)
			}
			if got := m[`fibril_tcp_reconcile_outcomes_total{outcome="`+tc.outcome+`"}`]; got != 1 {
				t.Errorf("reconcile outcome %s counted %v times, want 1", tc.outcome, got)
			}
		})
	}
}

// TestResumeWhileOldSocketAlive: the path to the broker goes half-open (the
// proxy swallows everything, closes nothing). The client declares the
// connection dead by its heartbeat (docs/protocol.md#heartbeats) and resumes on a new socket
// while the broker still holds the old one: the new socket takes over
// (`resumed`, S-104), and when the old socket finally ends it neither ends
// nor parks the session. Pre-freeze tags stay settleable (S-62) and the
// consumer keeps receiving; a restart then shows nothing unacked left.
func TestResumeWhileOldSocketAlive(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "--runtime_seed.connection.reconnect_grace_ms=30000")
	px := newProxy(t, b.Addr)
	c := newClient(t, px.Addr(), func(o *client.Options) { o.Heartbeat = 500 * time.Millisecond })
	pub := newClient(t, b.Addr)
	const topic = "half-open"
	for i := range 2 {
		publish(t, pub, topic, client.Message{Payload: []byte(fmt.Sprint("m", i))})
	}
	sub := subscribe(t, c, topic, client.SubscribeOptions{Prefetch: 4})
	d0, d1 := next(t, sub, waitTimeout), next(t, sub, waitTimeout)
	if d0.Offset != 0 || d1.Offset != 1 {
		t.Fatalf("deliveries %d, %d", d0.Offset, d1.Offset)
	}

	if n := px.Freeze(); n != 1 {
		t.Fatalf("froze %d connections, want 1", n)
	}
	testkit.Eventually(t, waitTimeout, "the client to reconnect after its heartbeat timeout", func() bool { return c.Stats().Reconnects == 1 })
	if err := d0.Ack(ctxT(t, opTimeout)); err != nil {
		t.Fatalf("ack of a pre-freeze delivery after the takeover: %v", err)
	}
	off2 := publish(t, pub, topic, client.Message{Payload: []byte("m2")})
	if d := next(t, sub, waitTimeout); d.Offset != off2 {
		t.Fatalf("after the takeover: delivery %d %q, want %d", d.Offset, d.Payload, off2)
	} else {
		ack(t, d)
	}

	// Now the old socket ends at the broker.
	if n := px.CutFrozen(); n != 1 {
		t.Fatalf("cut %d frozen connections, want 1", n)
	}
	testkit.Eventually(t, waitTimeout, "the broker to drop the old socket", func() bool {
		return metric(t, b, "fibril_tcp_connections_open") == 2 // pub and the new socket
	})
	m := metrics(t, b)
	if m["fibril_sessions_dormant"] != 0 || m["fibril_sessions_live"] != 2 {
		t.Fatalf("after the old socket ended: %v dormant, %v live sessions; want 0 and 2", m["fibril_sessions_dormant"], m["fibril_sessions_live"])
	}
	if err := d1.Ack(ctxT(t, opTimeout)); err != nil {
		t.Fatalf("ack of the other pre-freeze delivery: %v", err)
	}
	off3 := publish(t, pub, topic, client.Message{Payload: []byte("m3")})
	if d := next(t, sub, waitTimeout); d.Offset != off3 {
		t.Fatalf("after the old socket ended: delivery %d %q, want %d", d.Offset, d.Payload, off3)
	} else {
		ack(t, d)
	}
	barrier(t, c)
	if st := c.Stats(); st.Reconnects != 1 || st.StaleSettles != 0 {
		t.Fatalf("client stats: %+v", st)
	}
	c.Close()
	pub.Close()

	b.stop()
	b2 := b.restart()
	c2 := newClient(t, b2.Addr)
	sub2 := subscribe(t, c2, topic, client.SubscribeOptions{Prefetch: 4})
	sentinel := publish(t, c2, topic, client.Message{Payload: []byte("sentinel")})
	if d := next(t, sub2, waitTimeout); d.Offset != sentinel {
		t.Fatalf("after restart: delivery %d %q, want only the sentinel %d (everything else was acked)", d.Offset, d.Payload, sentinel)
	}
}

// TestReconnectAfterGraceExpiry: a client that comes back after its
// session's grace expired gets `resume_not_found` (S-101, S-103): its old
// tags are stale (docs/protocol.md#resume), the unacked messages were released at the
// expiry (S-54), and reconcile (restore, the Go default) recreates the
// subscription (`server_restored`, S-109), so the consumer gets them
// again and keeps receiving.
func TestReconnectAfterGraceExpiry(t *testing.T) {
	t.Parallel()
	const grace = 1500 * time.Millisecond
	b := startBroker(t, fmt.Sprintf("--runtime_seed.connection.reconnect_grace_ms=%d", grace.Milliseconds()))
	px := newProxy(t, b.Addr)
	c := newClient(t, px.Addr(), func(o *client.Options) { o.DialTimeout = proxyHold })
	const topic = "too-late"
	for i := range 3 {
		publish(t, c, topic, client.Message{Payload: []byte(fmt.Sprint("m", i))})
	}
	sub := subscribe(t, c, topic, client.SubscribeOptions{Prefetch: 4})
	var ds []*client.Delivery
	for range 3 {
		ds = append(ds, next(t, sub, waitTimeout))
	}
	ack(t, ds[0])
	barrier(t, c)

	px.SetTarget("")
	px.Cut()
	testkit.Eventually(t, waitTimeout, "the session to go dormant", func() bool { return metric(t, b, "fibril_sessions_dormant") == 1 })
	testkit.Eventually(t, grace+waitTimeout, "the grace to expire", func() bool {
		return metric(t, b, "fibril_tcp_reconnect_grace_expired_total") == 1
	})
	px.SetTarget(b.Addr)

	for _, want := range []uint64{ds[1].Offset, ds[2].Offset} {
		d := next(t, sub, waitTimeout)
		if d.Offset != want {
			t.Fatalf("after the expired grace: delivery %d %q, want %d", d.Offset, d.Payload, want)
		}
		ack(t, d)
	}
	if err := ds[1].Ack(ctxT(t, opTimeout)); !errors.Is(err, client.ErrStaleDelivery) {
		t.Fatalf("ack of a delivery from the expired session: %v, want ErrStaleDelivery", err)
	}
	off := publish(t, c, topic, client.Message{Payload: []byte("m3")})
	if d := next(t, sub, waitTimeout); d.Offset != off {
		t.Fatalf("new message: delivery %d, want %d", d.Offset, off)
	} else {
		ack(t, d)
	}
	barrier(t, c)
	expectNone(t, sub, 300*time.Millisecond)
	m := metrics(t, b)
	if m["fibril_tcp_resume_rejected_total"] != 1 || m[`fibril_tcp_reconcile_outcomes_total{outcome="restored"}`] != 1 {
		t.Fatalf("resume rejected %v (want 1: resume_not_found), reconcile restored %v (want 1)",
			m["fibril_tcp_resume_rejected_total"], m[`fibril_tcp_reconcile_outcomes_total{outcome="restored"}`])
	}
}
