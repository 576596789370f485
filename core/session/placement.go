package session

import (
	"context"

	"github.com/fibrilgo/fibril/core/wire"
)

// PlacementWaiter is implemented by a Router whose declarations are
// placed on owners after they are stored (core/routing's SessionRouter:
// the placement controller assigns every new partition an owner). A
// declaration is ready when it returns: DECLARE_QUEUE_OK and
// DECLARE_PLEXUS_OK wait for AwaitPlacement, so that a client may operate
// on every partition as soon as it has the answer (docs/protocol.md#declare).
type PlacementWaiter interface {
	// AwaitPlacement returns once every partition of the queue (topic,
	// group) — or of the stream topic, when stream is set — has an owner
	// in this broker's view, or when it gives up: at its own bound, or
	// when ctx ends. The declaration stands either way.
	AwaitPlacement(ctx context.Context, topic, group string, stream bool)
}

// answerWhenPlaced sends a declaration's answer once its partitions are
// placed (PlacementWaiter), from a goroutine of its own: the reader goes
// on with the connection's other frames meanwhile (PINGs, operations on
// other channels), as it does while a relayed request waits for its
// owner. The answer keeps the request's reply slot, so a client that
// piles up declarations is bounded by its slots like any other request.
// Without a PlacementWaiter (standalone) the answer goes out at once.
// Reader goroutine only.
func (c *Conn) answerWhenPlaced(op wire.Op, id uint64, body wire.Encoder, topic, group string, stream bool) {
	w, ok := c.srv.opts.Router.(PlacementWaiter)
	if !ok {
		c.reply(op, id, body)
		return
	}
	c.deferReply()
	go func() {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-c.done: // nobody to answer any more
				cancel()
			case <-ctx.Done():
			}
		}()
		w.AwaitPlacement(ctx, topic, group, stream)
		c.enqueue(outFrame{op: op, reqID: id, body: body, slot: true})
	}()
}
