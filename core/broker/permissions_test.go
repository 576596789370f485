package broker

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/testkit"
	"github.com/fibrilgo/fibril/core/wire"
)

// Per-user permissions (docs/admin.md#permissions), on a cluster whose
// queues are owned by private brokers, so every operation goes through
// the public gateway: a user may publish and consume "orders*" only.
// Allowed operations work; a confirmed publish, a subscribe and a declare
// outside the list get ERROR 403 and the connection stays open; a
// fire-and-forget publish is dropped and counted. The owner checks too,
// for the acting user of the forwarded session (a raw @node session
// shows it), and refuses a forwarded session that names no user.
func TestPermissionsDirectAndThroughAGateway(t *testing.T) {
	bs, admin := startPrivateCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, topic := range []string{"orders", "secret"} {
		if _, err := admin.DeclareQueue(ctx, client.QueueSpec{Topic: topic, Partitions: 2}); err != nil {
			t.Fatal(err)
		}
	}
	awaitPlaced(t, bs[0], 10*time.Second, "orders", "secret")
	if code, body := adminDo(t, bs[0], "POST", "/admin/api/users", `{"username":"app","password":"app-secret"}`); code != 201 {
		t.Fatalf("add user: %d %s", code, body)
	}
	perms := `{"permissions":[{"topics":["orders*"],"actions":["publish","consume"]}]}`
	if code, body := adminDo(t, bs[1], "PUT", "/admin/api/users/app/permissions", perms); code != 200 {
		t.Fatalf("set permissions: %d %s", code, body)
	}
	if code, body := adminDo(t, bs[0], "PUT", "/admin/api/users/app/permissions", `{"permissions":[{"topics":["x"],"actions":["delete"]}]}`); code != 400 {
		t.Fatalf("an unknown action: %d %s", code, body)
	}
	// The user store is shared: the public broker applies the list.
	testkit.Eventually(t, 10*time.Second, "the permissions reach the gateway", func() bool {
		_, body := adminDo(t, bs[0], "GET", "/admin/api/users", "")
		return strings.Contains(body, `"orders*"`)
	})

	private := map[string]bool{bs[1].BrokerAddr().String(): true, bs[2].BrokerAddr().String(): true}
	app, err := client.Dial(ctx, client.Options{Addrs: []string{bs[0].BrokerAddr().String()}, Username: "app", Password: "app-secret",
		Dial: privateGuard(t, private)})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	forbidden := func(what string, err error) {
		t.Helper()
		var be *client.Error
		if !errors.As(err, &be) || be.Code != wire.CodeForbidden || !strings.Contains(be.Message, `user "app" may not`) {
			t.Fatalf("%s: %v, want ERROR 403", what, err)
		}
	}
	p0 := uint32(0)
	if _, err := app.Publisher("orders", client.PublisherOptions{}).PublishConfirmed(ctx, client.Message{Partition: &p0, Payload: []byte("ok")}); err != nil {
		t.Fatalf("an allowed publish: %v", err)
	}
	_, err = app.Publisher("secret", client.PublisherOptions{}).PublishConfirmed(ctx, client.Message{Partition: &p0, Payload: []byte("no")})
	forbidden("publish to secret", err)
	_, err = app.Subscribe(ctx, "secret", client.SubscribeOptions{Partitions: []uint32{0}})
	forbidden("subscribe to secret", err)
	_, err = app.DeclareQueue(ctx, client.QueueSpec{Topic: "orders-new"})
	forbidden("declare", err)
	dropped := counterValue(t, bs[0], "fibril_permission_denied_total")
	if err := app.Publisher("secret", client.PublisherOptions{}).Publish(ctx, client.Message{Partition: &p0, Payload: []byte("ff")}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the refused fire-and-forget publish is counted", func() bool {
		return counterValue(t, bs[0], "fibril_permission_denied_total") > dropped
	})
	// The connection is still open and still allowed what it was.
	sub, err := app.Subscribe(ctx, "orders", client.SubscribeOptions{Partitions: []uint32{0}, AutoAck: true})
	if err != nil {
		t.Fatalf("an allowed subscribe after the refusals: %v", err)
	}
	if d, err := sub.Next(ctx); err != nil || string(d.Payload) != "ok" {
		t.Fatalf("consume: %v %v", d, err)
	}

	// The owner checks the acting user itself.
	snap := bs[0].cluster.cl.Snapshot()
	secret0, _ := snap.Partition(core.PartitionRef{Topic: "secret", Partition: 0})
	var owner *Broker
	for _, b := range bs {
		if b.nodeID == secret0.Node {
			owner = b
		}
	}
	nc, err := net.Dial("tcp", owner.BrokerAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	r := newRawConn(t, nc)
	r.hello(nil)
	r.expect(wire.OpAuthOK, r.send(wire.OpAuth, &wire.Auth{Username: "@node", Password: "test-secret"}))
	origin := "n0" // a gateway other than the owner
	if owner.nodeID == "n0" {
		origin = "n1"
	}
	ffs := &wire.ForwardedSession{V2: true, OriginNodeID: origin, HopCount: 1, ActingUsername: "",
		ClientID: "0190c0de-0000-7000-8000-000000000002", ConnectionID: 9, ClientRemoteAddr: "127.0.0.1:5124"}
	r.expectError(wire.OpError, r.send(wire.OpForwardedSession, ffs), wire.CodeForbidden)
	ffs.ActingUsername = "app"
	r.expect(wire.OpForwardedSessionOK, r.send(wire.OpForwardedSession, ffs))
	r.expectError(wire.OpError, r.send(wire.OpPublish, &wire.Publish{Topic: "secret", RequireConfirm: true, Payload: []byte("x")}), wire.CodeForbidden)
	for n := range uint32(2) {
		if p, _ := snap.Partition(core.PartitionRef{Topic: "orders", Partition: n}); p.Node == owner.nodeID {
			r.expect(wire.OpPublishOK, r.send(wire.OpPublish, &wire.Publish{Topic: "orders", Partition: n, RequireConfirm: true, Payload: []byte("y")}))
		}
	}

	// Unrestricted again: the refused publish goes through.
	if code, body := adminDo(t, bs[0], "PUT", "/admin/api/users/app/permissions", `{"permissions":null}`); code != 200 {
		t.Fatalf("clear permissions: %d %s", code, body)
	}
	testkit.Eventually(t, 10*time.Second, "secret allowed again", func() bool {
		_, err := app.Publisher("secret", client.PublisherOptions{}).PublishConfirmed(ctx, client.Message{Partition: &p0, Payload: []byte("now")})
		return err == nil
	})
}

// On a standalone broker (the client connected to the owner itself): the
// same answers, and declare is checked as an action of its own.
func TestPermissionsStandalone(t *testing.T) {
	b := startBroker(t)
	if code, body := adminDo(t, b, "POST", "/admin/api/users", `{"username":"ro","password":"ro-secret"}`); code != 201 {
		t.Fatalf("add user: %d %s", code, body)
	}
	if code, body := adminDo(t, b, "PUT", "/admin/api/users/ro/permissions", `{"permissions":[{"topics":["*"],"actions":["consume"]}]}`); code != 200 {
		t.Fatalf("set permissions: %d %s", code, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{Addrs: []string{b.BrokerAddr().String()}, Username: "ro", Password: "ro-secret", Dial: loopbackOnly(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Publisher("logs", client.PublisherOptions{}).PublishConfirmed(ctx, client.Message{Payload: []byte("x")})
	var be *client.Error
	if !errors.As(err, &be) || be.Code != wire.CodeForbidden {
		t.Fatalf("publish by a consume-only user: %v", err)
	}
	if _, err := c.DeclareQueue(ctx, client.QueueSpec{Topic: "logs"}); !errors.As(err, &be) || be.Code != wire.CodeForbidden {
		t.Fatalf("declare by a consume-only user: %v", err)
	}
	if _, err := c.Subscribe(ctx, "logs", client.SubscribeOptions{}); err != nil {
		t.Fatalf("subscribe by a consume-only user: %v", err)
	}
}

// A cluster switches permissions on only once every member announces
// them: a member whose build does not (here: its label taken away, as an
// older broker's would lack it) makes a new list 409, naming it; clearing
// stays possible.
func TestPermissionsWaitForEveryBroker(t *testing.T) {
	bs := startMemCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if code, body := adminDo(t, bs[0], "POST", "/admin/api/users", `{"username":"app","password":"app-secret"}`); code != 201 {
		t.Fatalf("add user: %d %s", code, body)
	}
	if err := bs[2].cluster.cl.SetLabel(ctx, core.LabelFeatures, ""); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "n2's label gone in n0's view", func() bool {
		return bs[0].cluster.cl.Snapshot().Members["n2"].Info.Labels[core.LabelFeatures] == ""
	})
	perms := `{"permissions":[{"topics":["*"],"actions":["consume"]}]}`
	if code, body := adminDo(t, bs[0], "PUT", "/admin/api/users/app/permissions", perms); code != 409 || !strings.Contains(body, "n2") {
		t.Fatalf("permissions with an old broker in the cluster: %d %s", code, body)
	}
	if code, body := adminDo(t, bs[0], "PUT", "/admin/api/users/app/permissions", `{"permissions":null}`); code != 200 {
		t.Fatalf("clearing: %d %s", code, body)
	}
	if err := bs[2].cluster.cl.SetLabel(ctx, core.LabelFeatures, featurePermissions); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "permissions accepted once every broker has them", func() bool {
		code, _ := adminDo(t, bs[0], "PUT", "/admin/api/users/app/permissions", perms)
		return code == 200
	})
}
