package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/wire"
)

// A declaration is ready when it returns: a client that declares a queue
// through the public broker and subscribes to every partition at once —
// over one raw connection, re-sending nothing, as an SDK that does not
// retry a 409 or a 503 — gets SUBSCRIBE_OK for every partition, the
// privately owned ones included, 50 declarations in a row.
func TestDeclareThenSubscribeAtOnce(t *testing.T) {
	bs := startMemClusterWith(t, 3, func(i int) []string {
		if i > 0 {
			return []string{"--broker.visibility=private"}
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := client.DialConn(ctx, bs[0].BrokerAddr().String(), client.ConnConfig{Username: "fibril", Password: "fibril",
		Dial: loopbackOnly(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const rounds, parts = 50, 3
	for i := range rounds {
		topic := fmt.Sprintf("ready-%d", i)
		f, err := conn.Do(ctx, wire.OpDeclareQueue, &wire.DeclareQueue{Topic: topic, PartitionCount: wire.Some(uint32(parts))})
		if err != nil || f.Op != wire.OpDeclareQueueOK {
			t.Fatalf("round %d: declare: %v %v", i, f.Op, err)
		}
		for p := range uint32(parts) {
			f, err := conn.Do(ctx, wire.OpSubscribe, &wire.Subscribe{Topic: topic, Partition: p, Prefetch: 1})
			if err != nil {
				t.Fatalf("round %d: subscribe %s#%d: %v", i, topic, p, err)
			}
			if f.Op != wire.OpSubscribeOK {
				var e wire.ErrorBody
				_ = e.Decode(f.Body)
				t.Fatalf("round %d: subscribe %s#%d right after the declaration answered %v %d %q", i, topic, p, f.Op, e.Code, e.Message)
			}
		}
	}
}

// When placement cannot finish — the only node is draining, so no live
// node takes partitions — the declaration still answers "stored" once
// routing.declare_placement_timeout_ms has passed, and a SUBSCRIBE then
// gets today's answer (503: no owner yet), not a hang.
func TestDeclareAnswersWhenPlacementCannotFinish(t *testing.T) {
	bs := startMemCluster(t, 1)
	b := bs[0]
	code, body := adminDo(t, b, "GET", "/admin/api/runtime-settings", "")
	if code != 200 {
		t.Fatalf("get settings: %d %s", code, body)
	}
	var view struct {
		Version  uint64         `json:"version"`
		Settings map[string]any `json:"settings"`
	}
	if err := json.Unmarshal([]byte(body), &view); err != nil {
		t.Fatal(err)
	}
	view.Settings["routing"].(map[string]any)["declare_placement_timeout_ms"] = 200
	delete(view.Settings, "version")
	nb, _ := json.Marshal(map[string]any{"expected_version": view.Version, "settings": view.Settings})
	if code, body := adminDo(t, b, "PUT", "/admin/api/runtime-settings", string(nb)); code != 200 {
		t.Fatalf("put settings: %d %s", code, body)
	}
	if code, body := adminDo(t, b, "POST", "/admin/api/drain", `{"grace_ms":0}`); code != 200 {
		t.Fatalf("drain: %d %s", code, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := client.DialConn(ctx, b.BrokerAddr().String(), client.ConnConfig{Username: "fibril", Password: "fibril",
		Dial: loopbackOnly(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	f, err := conn.Do(ctx, wire.OpDeclareQueue, &wire.DeclareQueue{Topic: "stuck", PartitionCount: wire.Some(uint32(2))})
	if err != nil || f.Op != wire.OpDeclareQueueOK {
		t.Fatalf("declare: %v %v", f.Op, err)
	}
	var ok wire.DeclareQueueOK
	if err := ok.Decode(f.Body); err != nil || ok.Status != "stored" || ok.PartitionCount != 2 {
		t.Fatalf("DECLARE_QUEUE_OK = %+v %v", ok, err)
	}
	f, err = conn.Do(ctx, wire.OpSubscribe, &wire.Subscribe{Topic: "stuck", Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	var e wire.ErrorBody
	if f.Op == wire.OpSubscribeOK || e.Decode(f.Body) != nil || e.Code != wire.CodeUnavailable {
		t.Fatalf("subscribe to an unplaced partition answered %v %+v, want 503", f.Op, e)
	}
}
