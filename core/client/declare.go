package client

import (
	"context"
	"time"

	"github.com/fibrilgo/fibril/core/wire"
)

// DLQPolicy says where dead letters of a queue go (wire.DLQPolicy).
type DLQPolicy struct {
	Kind  wire.DLQKind // DLQDiscard, DLQBrokerDLQ or DLQNamed
	Topic string       // DLQNamed only
	Group string       // DLQNamed only; "" = default namespace
}

// QueueSpec declares a queue (wire.DeclareQueue, docs/protocol.md#declare).
type QueueSpec struct {
	Topic      string
	Group      string        // "" = default namespace
	Partitions uint32        // 0 = broker default
	DLQ        *DLQPolicy    // nil = broker default
	MaxRetries *uint32       // redeliveries before dead-lettering; nil = broker default
	DefaultTTL time.Duration // TTL for messages published without one; 0 = none
}

// Durability is the storage tier of a stream (wire.DeclarePlexus).
type Durability uint8

const (
	DurabilityDefault     Durability = iota // durable, as every SDK sends
	DurabilityEphemeral                     // staged in memory
	DurabilitySpeculative                   // persisted, not replicated
	DurabilityDurable                       // persisted and replicated
)

func (d Durability) wire() wire.Durability {
	switch d {
	case DurabilityEphemeral:
		return wire.DurabilityEphemeral
	case DurabilitySpeculative:
		return wire.DurabilitySpeculative
	}
	return wire.DurabilityDurable
}

// StreamSpec declares a stream (DECLARE_PLEXUS, wire.DeclarePlexus).
type StreamSpec struct {
	Topic             string
	Partitions        uint32 // 0 = broker default
	Durability        Durability
	MaxAge            time.Duration // 0 = unbounded
	MaxBytes          uint64        // 0 = unbounded
	MaxRecords        uint64        // 0 = unbounded
	ReplicationFactor uint32        // 0 = cluster default
}

// DeclareQueue declares a queue on the bootstrap broker (any broker takes
// declares) and returns its effective partition count. Declares are
// idempotent; an earlier declaration's count wins in cluster mode. The
// topology of the topic is refreshed afterwards.
func (c *Client) DeclareQueue(ctx context.Context, spec QueueSpec) (uint32, error) {
	body := &wire.DeclareQueue{Topic: spec.Topic, Group: optStr(spec.Group)}
	if spec.DLQ != nil {
		body.DLQPolicy = wire.Some(wire.DLQPolicy{Kind: spec.DLQ.Kind, Topic: spec.DLQ.Topic, Group: optStr(spec.DLQ.Group)})
	}
	if spec.MaxRetries != nil {
		body.DLQMaxRetries = wire.Some(*spec.MaxRetries)
	}
	if spec.Partitions > 0 {
		body.PartitionCount = wire.Some(spec.Partitions)
	}
	if spec.DefaultTTL > 0 {
		body.DefaultMessageTTLMillis = wire.Some(uint64(spec.DefaultTTL.Milliseconds()))
	}
	f, err := c.roundTrip(ctx, opSpec{op: wire.OpDeclareQueue, prepare: func() (*routeKey, wire.Encoder) { return nil, body }})
	if err != nil {
		return 0, err
	}
	var ok wire.DeclareQueueOK
	if err := f.Decode(&ok); err != nil {
		c.stats.protocolViolations.Add(1)
		return 0, protocolErrorf("malformed DECLARE_QUEUE_OK: %v", err)
	}
	c.refreshTopology(ctx, spec.Topic, body.Group)
	return ok.PartitionCount, nil
}

// DeclareStream declares a stream and returns its effective partition
// count.
func (c *Client) DeclareStream(ctx context.Context, spec StreamSpec) (uint32, error) {
	body := &wire.DeclarePlexus{Topic: spec.Topic, Durability: spec.Durability.wire()}
	if spec.Partitions > 0 {
		body.PartitionCount = wire.Some(spec.Partitions)
	}
	if spec.MaxAge > 0 {
		body.Retention.MaxAgeMillis = wire.Some(uint64(spec.MaxAge.Milliseconds()))
	}
	if spec.MaxBytes > 0 {
		body.Retention.MaxBytes = wire.Some(spec.MaxBytes)
	}
	if spec.MaxRecords > 0 {
		body.Retention.MaxRecords = wire.Some(spec.MaxRecords)
	}
	if spec.ReplicationFactor > 0 {
		body.ReplicationFactor = wire.Some(spec.ReplicationFactor)
	}
	f, err := c.roundTrip(ctx, opSpec{op: wire.OpDeclarePlexus, prepare: func() (*routeKey, wire.Encoder) { return nil, body }})
	if err != nil {
		return 0, err
	}
	var ok wire.DeclarePlexusOK
	if err := f.Decode(&ok); err != nil {
		c.stats.protocolViolations.Add(1)
		return 0, protocolErrorf("malformed DECLARE_PLEXUS_OK: %v", err)
	}
	c.refreshTopology(ctx, spec.Topic, wire.None[string]())
	return ok.PartitionCount, nil
}
