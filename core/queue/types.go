package queue

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/fibrilgo/fibril/core/clock"
	"github.com/fibrilgo/fibril/core/storage"
	"github.com/fibrilgo/fibril/core/wire"
)

// Kind is what a topic is for life: a work queue or a stream (S-22).
type Kind uint8

const (
	KindQueue  Kind = 1
	KindStream Kind = 2
)

func (k Kind) String() string {
	switch k {
	case KindQueue:
		return "queue"
	case KindStream:
		return "stream"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Key identifies a work queue: (topic, group?) (S-15). The group is a
// namespace inside the topic, not a consumer group; absent is the default
// namespace and is distinct from any named group.
type Key struct {
	Topic string
	Group wire.Option[string]
}

func (k Key) String() string {
	if g, ok := k.Group.Get(); ok {
		return k.Topic + "/" + g
	}
	return k.Topic
}

// QueueSpec is a DECLARE_QUEUE request (S-18, wire.DeclareQueue, docs/protocol.md#declare).
type QueueSpec struct {
	Key
	PartitionCount   wire.Option[uint32] // absent = Settings.DefaultPartitionCount; 0 is raised to 1
	DLQ              wire.Option[wire.DLQPolicy]
	MaxRetries       wire.Option[uint32] // absent keeps the current limit (default 5, S-60)
	DefaultTTLMillis wire.Option[uint64]
}

// StreamSpec is a DECLARE_PLEXUS request (S-70, wire.DeclarePlexus). Streams are
// only recorded for now; serving them comes with the streams capability.
type StreamSpec struct {
	Topic             string
	PartitionCount    wire.Option[uint32]
	Durability        wire.Durability
	Retention         wire.StreamRetention
	ReplicationFactor wire.Option[uint32]
}

// QueueInfo describes one declared (or auto-created) queue.
type QueueInfo struct {
	Key
	PartitionCount      uint32
	PartitioningVersion uint64 // docs/protocol.md#topology; always 0 in standalone mode
	DLQ                 wire.Option[wire.DLQPolicy]
	MaxRetries          uint32
	DefaultTTLMillis    wire.Option[uint64]
}

// StreamInfo describes one declared stream.
type StreamInfo struct {
	StreamSpec
	PartitionCount uint32
}

// Replicated reports whether the stream's records go to followers: only
// the durable tier's do; the express tiers stay on their owner (S-85).
func (i StreamInfo) Replicated() bool { return i.Durability == wire.DurabilityDurable }

// Settings are the runtime settings the engine reads on every use, so a
// change to the runtime settings document applies live (S-170 `delivery`,
// `partitioning`).
type Settings struct {
	InflightTTL           time.Duration // delivery.inflight_ttl_ms: lease length (S-50)
	ExpiryPollMin         time.Duration // delivery.expiry_poll_min_ms: longest sleep of the expiry worker
	ExpiryBatchMax        int           // delivery.expiry_batch_max: most requeues per pass
	DefaultPartitionCount uint32        // partitioning.default_partition_count
}

// DefaultSettings are S-170's defaults.
func DefaultSettings() Settings {
	return Settings{
		InflightTTL:           30 * time.Second,
		ExpiryPollMin:         15 * time.Second,
		ExpiryBatchMax:        8192,
		DefaultPartitionCount: 1,
	}
}

// Options configure a Manager.
type Options struct {
	Dir        string          // root of all queue data, e.g. <data_dir>/queues
	Storage    storage.Options // fsync policy, segment size, FS seam
	Settings   func() Settings // nil = DefaultSettings
	AutoCreate bool            // standalone mode: create a queue on first publish/subscribe (S-21)
	// LazyPartitions opens (and recovers) a partition only when it is first
	// used, not at Open or declaration. In a cluster most partitions are
	// owned by other nodes: their local copies are never loaded (S-138).
	LazyPartitions bool
	// DeadLetterPartition, when set (coordinated mode), chooses the
	// partition of a dead-letter target that this node may append to — one
	// it owns — and makes sure the engine has the target queue; an error
	// leaves the message where it was (it is retried later). nil: any
	// partition, round-robin, the target created on demand (standalone).
	DeadLetterPartition func(target Key) (uint32, error)
	// RemoteDeadLetter, when set, copies a dead letter to the target's
	// owner when DeadLetterPartition answers ErrNoLocalPartition; done
	// reports whether the copy was confirmed there. It must not block.
	RemoteDeadLetter func(target Key, msg *Message, done func(ok bool))
	MaxMessageBytes  int                // payload cap (broker.max_message_bytes); larger → ErrTooLarge
	GlobalDLQ        func() (Key, bool) // S-64 broker-wide DLQ target; nil or false = none (then discard, S-65)
	Now              func() time.Time   // nil = time.Now
	Logger           *slog.Logger       // nil = slog.Default()
	// Gates, when set (a cluster broker), gives each partition the engine
	// opens — a queue's, or a durable stream's — its ConfirmGate, or nil
	// for none. A partition with a gate delivers nothing until its limit
	// is set (Gated.SetDeliverable); Gates may set it before it returns.
	Gates func(Gated) ConfirmGate
	// Holds, when set, is asked for the delivery hold of each queue
	// partition the engine opens (at Open, on first use, by GrowQueue),
	// before the partition can deliver anything: held true applies
	// Partition.SetHold(from). Holds live in memory only, so whoever
	// drives a repartition answers here from its own durable record.
	Holds func(key Key, partition uint32) (from uint64, held bool)
	// Clock drives leases, TTL expiry and delays (added by the engine, so
	// tests can run them without sleeping). nil = real time, reading Now
	// above when it is set.
	Clock clock.Clock
}

// Depth counts one partition's unsettled messages by state (metrics,
// admin). Messages on their way to a dead-letter queue, or whose ack is
// being written, are in none of them.
type Depth struct {
	Ready    uint64 `json:"ready"`    // deliverable now (or as soon as a subscription has credit)
	Inflight uint64 `json:"inflight"` // delivered, leased, not yet settled
	Delayed  uint64 `json:"delayed"`  // waiting for a not_before (publish delay or nack delay)
}

// QuarantineInfo names a partition that refuses to serve because its files
// hold damage that is not a torn tail (storage.ErrQuarantined).
type QuarantineInfo struct {
	Key
	Partition uint32
	Err       error
}

// Message is one publish as the session hands it to the engine. The
// engine copies what it keeps: Payload and Headers may alias a frame
// buffer that is reused after Publish returns.
type Message struct {
	ContentType wire.ContentType
	Headers     wire.Headers        // as received; Publish normalises (S-34) and checks reserved keys (S-33)
	Published   uint64              // producer clock, echoed verbatim
	Received    int64               // broker clock at frame read, unix ms (TTL base, S-39)
	TTLMillis   wire.Option[uint64] // relative to Received; absent = the queue's default, if any
	NotBefore   uint64              // PUBLISH_DELAYED: absolute unix ms; 0 = deliverable now
	Payload     []byte
	// PartitioningVersion is the version the producer routed by; Publish
	// refuses one below the queue's (ErrStalePartitioning) under the lock
	// that hands out offsets, so a cutover offset is exact (Cutover).
	PartitioningVersion uint64
}

// Delivery is one message handed to a subscription. The session turns it
// into a DELIVER frame (adding its sub_id). Everything in it is owned by
// the delivery and immutable.
type Delivery struct {
	Key
	Partition   uint32
	Offset      uint64
	Tag         uint64 // unique in this process; settles this delivery (S-48)
	Published   uint64
	Received    int64
	ContentType wire.ContentType
	Headers     wire.Headers // fibril.retries added when the retry count is > 0 (S-49)
	Payload     []byte
}

// Consumer is the session side of one subscription.
type Consumer interface {
	// Deliver hands one delivery to the session. It is called with engine
	// locks held, so it must not block and must not call into the engine;
	// the session queues the delivery for its writer. For an auto-ack
	// subscription the engine settles the message as soon as Deliver
	// returns (S-53).
	//
	// Returning false accepts d but asks for no more: the subscription is
	// paused until Subscription.Resume. This is how a session whose client
	// reads slowly bounds its queue of deliveries — auto-ack subscriptions
	// have no prefetch credit to do it (docs/protocol.md#subscriptions).
	Deliver(d *Delivery) bool
}

// SubscribeOptions are the parameters of one queue subscription (S-43).
// Exclusive cohorts (consumer_group, consumer_target, member_id) will add
// fields here.
type SubscribeOptions struct {
	Prefetch uint32 // unsettled deliveries outstanding; 0 is treated as 1 (S-46)
	AutoAck  bool
	// Standby starts the subscription as an exclusive consumer group's
	// hot standby: nothing is delivered to it until SetStandby(false).
	Standby bool
}

// Stats are process-lifetime counters (reset on restart, S-163).
type Stats struct {
	Published, Delivered, Acked, Redelivered, Expired, DeadLettered, Discarded uint64
	// Streams: records appended, records handed to stream subscriptions
	// (each subscription counts its own), durable cursor commits.
	StreamPublished, StreamDelivered, CursorCommits uint64
	// Publishes refused by a full queue, and messages dropped to make
	// room (limits.go).
	OverflowRejected, OverflowDropped uint64
}
