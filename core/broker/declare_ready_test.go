package broker

import (
	"context"
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
