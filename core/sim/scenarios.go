package sim

import (
	"context"
	"fmt"
	"time"

	"github.com/fibrilgo/fibril/core/client"
)

// gatewayHeartbeatTimeout is how long a gateway's upstream session goes
// without a byte from the owner before it counts as lost: more than 3 ×
// the 5 s heartbeat, checked at each heartbeat, so between 15 and 20 s
// after the last byte (docs/protocol.md#heartbeats). A cut meant to
// outlast it lasts longer than that.
const gatewayHeartbeatTimeout = 20 * time.Second

// Scenarios are the runs the simulation knows, by name.
var Scenarios = []Scenario{
	{
		// The seed note's first: a two-way partition between the gateway
		// and a private owner, longer than the heartbeat timeout; the
		// gateway resumes, and every publish the client saw confirmed is
		// delivered.
		Name: "gateway-owner-partition", Spec: Spec{Public: 1, Private: 2}, Parts: 3,
		Faults: func(r *Run) {
			p := r.PrivateOwner()
			if p == nil {
				r.Ledger.Event("no private owner: nothing to cut")
				return
			}
			time.Sleep(r.Between(0, 5*time.Second))
			r.CutBoth(r.Gateway(), p)
			time.Sleep(r.Between(gatewayHeartbeatTimeout+time.Second, gatewayHeartbeatTimeout+15*time.Second))
		},
	},
	{
		// The seed note's second: the owner's answers to the gateway
		// lost, one way; the publish in flight answers 504.
		Name: "owner-answers-lost", Spec: Spec{Public: 1, Private: 2}, Parts: 2,
		Faults: func(r *Run) {
			p := r.PrivateOwner()
			if p == nil {
				r.Ledger.Event("no private owner: nothing to cut")
				return
			}
			time.Sleep(r.Between(0, 5*time.Second))
			r.CutOneWay(p, r.Gateway())
			time.Sleep(r.Between(gatewayHeartbeatTimeout+time.Second, gatewayHeartbeatTimeout+15*time.Second))
		},
		Check: func(r *Run) {
			if r.PrivateOwner() == nil {
				return
			}
			r.Ledger.mu.Lock()
			n := r.Ledger.failed["ERROR 504"]
			r.Ledger.mu.Unlock()
			if n == 0 {
				r.Ledger.violate("no publish answered 504 while the owner's answers were lost")
			}
		},
	},
	{
		// A private owner crashes while the gateway forwards to it: its
		// partitions fail over, it comes back as a follower.
		Name: "owner-failover", Spec: Spec{Public: 1, Private: 2}, Parts: 3,
		Faults: func(r *Run) {
			p := r.PrivateOwner()
			if p == nil {
				return
			}
			time.Sleep(r.Between(0, 5*time.Second))
			r.CrashNode(p)
			time.Sleep(r.Between(5*time.Second, 30*time.Second))
			r.RestartNode(p)
			time.Sleep(r.Between(0, 10*time.Second))
		},
	},
	{
		// A gateway crashes while its clients hold deliveries of privately
		// owned partitions; the clients move to the other gateway; the
		// owner releases what the dead gateway's sessions held.
		Name: "gateway-crash", Spec: Spec{Public: 2, Private: 1}, Parts: 3,
		Faults: func(r *Run) {
			time.Sleep(r.Between(0, 5*time.Second))
			g := r.Nodes[r.Rand.IntN(2)]
			r.CrashNode(g)
			time.Sleep(r.Between(5*time.Second, 30*time.Second))
			r.RestartNode(g)
		},
	},
	{
		// The controller loses coordination while a queue is being
		// declared and placed: another broker takes over placement, the
		// declaration completes, the new queue takes confirmed publishes.
		Name: "controller-change", Spec: Spec{Public: 1, Private: 2}, Parts: 2,
		Faults: func(r *Run) {
			ctrl := r.Controller()
			if ctrl == nil {
				r.Ledger.violate("no controller")
				return
			}
			cl, _, err := r.Client(context.Background(), r.Gateway())
			if err != nil {
				r.Ledger.violate("client: %v", err)
				return
			}
			done := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				_, err := cl.DeclareQueue(ctx, client.QueueSpec{Topic: "late", Partitions: 3})
				done <- err
			}()
			time.Sleep(r.Between(0, 50*time.Millisecond))
			r.Ledger.Event("pause coordination of the controller %s", ctrl.ID)
			r.Store.PauseMember(ctrl.ID)
			time.Sleep(r.Between(3*time.Second, 15*time.Second))
			r.Store.ResumeMember(ctrl.ID)
			r.Ledger.Event("resume coordination of %s", ctrl.ID)
			select {
			case err = <-done:
			case <-time.After(2 * time.Minute):
				err = fmt.Errorf("no answer")
			}
			if err != nil {
				// A declaration may fail while placement moves (503, retryable);
				// the client declares again, as an application would.
				r.Ledger.Event("declare during the change: %v", err)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				_, err = cl.DeclareQueue(ctx, client.QueueSpec{Topic: "late", Partitions: 3})
				cancel()
				if err != nil {
					r.Ledger.violate("declare after the controller change: %v", err)
					return
				}
			}
			pub := cl.Publisher("late", client.PublisherOptions{})
			for p := range uint32(3) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				var err error
				for range 20 { // retry what is retryable, bounded
					if _, err = pub.PublishConfirmed(ctx, client.Message{Partition: &p, Payload: []byte("late")}); err == nil || !client.Retryable(err) {
						break
					}
					time.Sleep(time.Second)
				}
				cancel()
				if err != nil {
					r.Ledger.violate("publish to late/%d after the controller change: %v", p, err)
				}
			}
		},
	},
	{
		// The link between the gateway and a private owner flaps while
		// the gateway resumes its upstream sessions.
		Name: "link-flapping", Spec: Spec{Public: 1, Private: 2}, Parts: 3,
		Faults: func(r *Run) {
			p := r.PrivateOwner()
			if p == nil {
				return
			}
			for range 3 + r.Rand.IntN(6) {
				r.CutBoth(r.Gateway(), p)
				time.Sleep(r.Between(200*time.Millisecond, gatewayHeartbeatTimeout+5*time.Second))
				r.Heal()
				time.Sleep(r.Between(100*time.Millisecond, 3*time.Second))
			}
		},
	},
	{
		// A random mix of the faults above, on a cluster of two public and
		// two private brokers.
		Name: "mix", Spec: Spec{Public: 2, Private: 2}, Parts: 4,
		Faults: func(r *Run) {
			for range 2 + r.Rand.IntN(4) {
				a := r.Nodes[r.Rand.IntN(len(r.Nodes))]
				b := r.Nodes[r.Rand.IntN(len(r.Nodes))]
				switch k := r.Rand.IntN(4); {
				case k == 0 && a != b:
					r.CutBoth(a, b)
				case k == 1 && a != b:
					r.CutOneWay(a, b)
				case k == 2:
					r.CrashNode(a)
				default:
					r.Ledger.Event("pause coordination of %s", a.ID)
					r.Store.PauseMember(a.ID)
				}
				time.Sleep(r.Between(time.Second, 25*time.Second))
				if r.Rand.IntN(2) == 0 {
					r.Heal()
					for _, n := range r.Nodes {
						r.Store.ResumeMember(n.ID)
						if n.B == nil {
							r.RestartNode(n)
						}
					}
				}
			}
		},
	},
}

// Extra are scenarios run by name (-sim.scenario) and by their own
// tests, outside the seed-to-scenario rotation of Scenarios (so that a
// campaign's seeds keep naming the same runs).
var Extra = []Scenario{
	{
		// Slow, uneven links between the brokers: every direction between
		// two brokers 20–250 ms one way, each connection up to 50 ms more
		// (connections overtake each other, bytes of one never do), and a
		// short cut between the gateway and a private owner on top.
		Name: "slow-links", Spec: Spec{Public: 1, Private: 2}, Parts: 3,
		Faults: func(r *Run) {
			for _, a := range r.Nodes {
				for _, b := range r.Nodes {
					if a != b {
						r.Net.SetDelay(a.Host, b.Host, r.Between(20*time.Millisecond, 250*time.Millisecond))
						r.Net.SetJitter(a.Host, b.Host, 50*time.Millisecond)
					}
				}
			}
			r.Ledger.Event("slow links")
			time.Sleep(r.Between(5*time.Second, 20*time.Second))
			if p := r.PrivateOwner(); p != nil {
				r.CutBoth(r.Gateway(), p)
				time.Sleep(r.Between(500*time.Millisecond, 10*time.Second))
				r.Heal()
			}
			time.Sleep(r.Between(5*time.Second, 20*time.Second))
			for _, a := range r.Nodes {
				for _, b := range r.Nodes {
					r.Net.SetDelay(a.Host, b.Host, 0)
					r.Net.SetJitter(a.Host, b.Host, 0)
				}
			}
			r.Ledger.Event("links fast again")
		},
	},
}

// ScenarioNamed returns the scenario called name.
func ScenarioNamed(name string) (Scenario, bool) {
	for _, s := range append(Scenarios[:len(Scenarios):len(Scenarios)], Extra...) {
		if s.Name == name {
			return s, true
		}
	}
	return Scenario{}, false
}
