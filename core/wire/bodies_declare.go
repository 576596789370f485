package wire

// Declaration bodies: DECLARE_QUEUE, DECLARE_QUEUE_OK, DECLARE_PLEXUS,
// DECLARE_PLEXUS_OK (docs/protocol.md#declare), with their composites DlqPolicy
// and StreamRetention.

const (
	magicDeclareQueue    = "FDQ1"
	magicDeclareQueueOK  = "FDK1"
	magicDeclarePlexus   = "FDP1"
	magicDeclarePlexusOK = "FPK1"
)

// DLQPolicy is the dead-letter policy. Topic and Group are meaningful
// (and encoded) only for DLQNamed.
type DLQPolicy struct {
	Kind  DLQKind
	Topic string
	Group Option[string]
}

func (d *DLQPolicy) appendTo(b []byte) []byte {
	b = append(b, byte(d.Kind))
	if d.Kind == DLQNamed {
		b = appendStr(b, d.Topic)
		b = appendOptStr(b, d.Group)
	}
	return b
}

func (d *DLQPolicy) read(r *reader) {
	d.Kind = DLQKind(r.enum8("dlq_policy", uint8(len(dlqKindNames))))
	d.Topic, d.Group = "", Option[string]{}
	if d.Kind == DLQNamed {
		d.Topic = r.str("dlq_policy.topic")
		d.Group = r.optStr("dlq_policy.group")
	}
}

// DeclareQueue is the DECLARE_QUEUE body (op 60, docs/protocol.md#declare).
// DefaultMessageTTLMillis is the tolerant tail: a body that ends
// before it decodes as absent, and AppendTo always writes it.
type DeclareQueue struct {
	Topic                   string
	Group                   Option[string]
	DLQPolicy               Option[DLQPolicy]
	DLQMaxRetries           Option[uint32] // redeliveries before dead-lettering
	PartitionCount          Option[uint32] // absent = broker default
	DefaultMessageTTLMillis Option[uint64]
}

// AppendTo appends the FDQ1 body, tolerant tail included.
func (d *DeclareQueue) AppendTo(b []byte) []byte {
	b = append(b, magicDeclareQueue...)
	b = appendStr(b, d.Topic)
	b = appendOptStr(b, d.Group)
	if d.DLQPolicy.Present {
		b = d.DLQPolicy.Value.appendTo(append(b, 1))
	} else {
		b = append(b, 0)
	}
	b = appendOptU32(b, d.DLQMaxRetries)
	b = appendOptU32(b, d.PartitionCount)
	return appendOptU64(b, d.DefaultMessageTTLMillis)
}

// Decode parses an FDQ1 body, with or without the default TTL tail.
func (d *DeclareQueue) Decode(b []byte) error {
	var r reader
	r.begin(b, OpDeclareQueue)
	for r.next() {
		r.magic(magicDeclareQueue)
		d.Topic = r.str("topic")
		d.Group = r.optStr("group")
		d.DLQPolicy.Present = r.present("dlq_policy")
		if d.DLQPolicy.Present {
			d.DLQPolicy.Value.read(&r)
		} else {
			d.DLQPolicy.Value = DLQPolicy{}
		}
		d.DLQMaxRetries = r.optU32("dlq_max_retries")
		d.PartitionCount = r.optU32("partition_count")
		d.DefaultMessageTTLMillis = Option[uint64]{}
		if r.more() {
			d.DefaultMessageTTLMillis = r.optU64("default_message_ttl_ms")
		}
		r.end()
	}
	return r.result()
}

// DeclareQueueOK is the DECLARE_QUEUE_OK body (op 61).
type DeclareQueueOK struct {
	Status         string // upstream sends "stored"; SDKs ignore it
	PartitionCount uint32 // effective count (an earlier declaration wins)
}

// AppendTo appends the FDK1 body.
func (d *DeclareQueueOK) AppendTo(b []byte) []byte {
	return appendDeclareOK(b, magicDeclareQueueOK, d.Status, d.PartitionCount)
}

// Decode parses an FDK1 body.
func (d *DeclareQueueOK) Decode(b []byte) error {
	return decodeDeclareOK(b, OpDeclareQueueOK, magicDeclareQueueOK, &d.Status, &d.PartitionCount)
}

// DeclarePlexusOK is the DECLARE_PLEXUS_OK body (op 63): the same
// layout as DECLARE_QUEUE_OK under another magic.
type DeclarePlexusOK struct {
	Status         string
	PartitionCount uint32
}

// AppendTo appends the FPK1 body.
func (d *DeclarePlexusOK) AppendTo(b []byte) []byte {
	return appendDeclareOK(b, magicDeclarePlexusOK, d.Status, d.PartitionCount)
}

// Decode parses an FPK1 body.
func (d *DeclarePlexusOK) Decode(b []byte) error {
	return decodeDeclareOK(b, OpDeclarePlexusOK, magicDeclarePlexusOK, &d.Status, &d.PartitionCount)
}

func appendDeclareOK(b []byte, magic, status string, count uint32) []byte {
	b = append(b, magic...)
	b = appendStr(b, status)
	return appendU32(b, count)
}

func decodeDeclareOK(b []byte, op Op, magic string, status *string, count *uint32) error {
	var r reader
	r.begin(b, op)
	for r.next() {
		r.magic(magic)
		*status = r.str("status")
		*count = r.u32("partition_count")
		r.end()
	}
	return r.result()
}

// StreamRetention is the retention: three independent optional bounds,
// absent meaning unbounded on that axis.
type StreamRetention struct {
	MaxAgeMillis Option[uint64]
	MaxBytes     Option[uint64]
	MaxRecords   Option[uint64]
}

// DeclarePlexus is the DECLARE_PLEXUS body (op 62): declares a
// stream.
type DeclarePlexus struct {
	Topic             string
	PartitionCount    Option[uint32] // absent = broker default
	Durability        Durability     // SDKs send DurabilityDurable by default
	Retention         StreamRetention
	ReplicationFactor Option[uint32] // absent = cluster default
}

// AppendTo appends the FDP1 body.
func (d *DeclarePlexus) AppendTo(b []byte) []byte {
	b = append(b, magicDeclarePlexus...)
	b = appendStr(b, d.Topic)
	b = appendOptU32(b, d.PartitionCount)
	b = append(b, byte(d.Durability))
	b = appendOptU64(b, d.Retention.MaxAgeMillis)
	b = appendOptU64(b, d.Retention.MaxBytes)
	b = appendOptU64(b, d.Retention.MaxRecords)
	return appendOptU32(b, d.ReplicationFactor)
}

// Decode parses an FDP1 body.
func (d *DeclarePlexus) Decode(b []byte) error {
	var r reader
	r.begin(b, OpDeclarePlexus)
	for r.next() {
		r.magic(magicDeclarePlexus)
		d.Topic = r.str("topic")
		d.PartitionCount = r.optU32("partition_count")
		d.Durability = Durability(r.enum8("durability", uint8(len(durabilityNames))))
		d.Retention.MaxAgeMillis = r.optU64("retention.max_age_ms")
		d.Retention.MaxBytes = r.optU64("retention.max_bytes")
		d.Retention.MaxRecords = r.optU64("retention.max_records")
		d.ReplicationFactor = r.optU32("replication_factor")
		r.end()
	}
	return r.result()
}
