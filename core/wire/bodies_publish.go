package wire

// Publishing, delivery and settlement bodies: PUBLISH, PUBLISH_DELAYED,
// PUBLISH_OK, DELIVER, ACK, NACK. All except
// PUBLISH_OK and DELIVER's sub_id prefix use the PublishKey order topic,
// group, partition.
//
// These are the hot-path bodies. Their decoders alias Payload and
// PartitionKey into the input buffer and take all strings from a single
// allocation (see primitives.go), so decoding into a reused value costs one
// allocation.

const (
	magicPublish        = "FPB1"
	magicPublishDelayed = "FPD1"
	magicPublishOK      = "FPO1"
	magicDeliver        = "FDL1"
	magicAck            = "FAK1"
	magicNack           = "FNK1"
)

// Publish is the PUBLISH body (op 20, docs/protocol.md#publish). TTLMillis is a
// tolerant tail: a body that ends before it decodes as "no TTL", and
// AppendTo always writes it.
type Publish struct {
	Topic               string
	Group               Option[string] // queue namespace, not the consumer group
	Partition           uint32
	RequireConfirm      bool
	ContentType         ContentType
	Headers             Headers
	Published           uint64         // producer clock, unix ms; advisory
	PartitionKey        Option[[]byte] // aliases the decoded buffer
	PartitioningVersion uint64         // input of the fence (docs/protocol.md#topology); 0 = initial/unknown
	Payload             []byte         // aliases the decoded buffer
	TTLMillis           Option[uint64] // relative to broker receipt (docs/protocol.md#publish)
}

// AppendTo appends the FPB1 body, tolerant tail included.
func (p *Publish) AppendTo(b []byte) []byte {
	b = append(b, magicPublish...)
	b = appendStr(b, p.Topic)
	b = appendOptStr(b, p.Group)
	b = appendU32(b, p.Partition)
	b = appendBool(b, p.RequireConfirm)
	b = appendContentType(b, p.ContentType)
	b = appendHeaders(b, p.Headers)
	b = appendU64(b, p.Published)
	b = appendOptBytes(b, p.PartitionKey)
	b = appendU64(b, p.PartitioningVersion)
	b = appendBytes(b, p.Payload)
	return appendOptU64(b, p.TTLMillis)
}

// Decode parses an FPB1 body, with or without the ttl_ms tail.
func (p *Publish) Decode(b []byte) error {
	var r reader
	r.begin(b, OpPublish)
	for r.next() {
		p.read(&r)
	}
	return r.result()
}

func (p *Publish) read(r *reader) {
	r.magic(magicPublish)
	p.Topic = r.str("topic")
	p.Group = r.optStr("group")
	p.Partition = r.u32("partition")
	p.RequireConfirm = r.boolean("require_confirm")
	p.ContentType = r.contentType("content_type")
	p.Headers = r.headers("headers", p.Headers)
	p.Published = r.u64("published")
	p.PartitionKey = r.optBytes("partition_key")
	p.PartitioningVersion = r.u64("partitioning_version")
	p.Payload = r.bytes("payload")
	p.TTLMillis = Option[uint64]{}
	if r.more() {
		p.TTLMillis = r.optU64("ttl_ms")
	}
	r.end()
}

// PublishDelayed is the PUBLISH_DELAYED body (op 21, docs/protocol.md#publish). Unlike
// PUBLISH it has no TTL and no tolerant tail, and not_before sits between
// require_confirm and content_type.
type PublishDelayed struct {
	Topic               string
	Group               Option[string]
	Partition           uint32
	RequireConfirm      bool
	NotBefore           uint64 // absolute unix ms (client clock)
	ContentType         ContentType
	Headers             Headers
	Published           uint64
	PartitionKey        Option[[]byte] // aliases the decoded buffer
	PartitioningVersion uint64
	Payload             []byte // aliases the decoded buffer
}

// AppendTo appends the FPD1 body.
func (p *PublishDelayed) AppendTo(b []byte) []byte {
	b = append(b, magicPublishDelayed...)
	b = appendStr(b, p.Topic)
	b = appendOptStr(b, p.Group)
	b = appendU32(b, p.Partition)
	b = appendBool(b, p.RequireConfirm)
	b = appendU64(b, p.NotBefore)
	b = appendContentType(b, p.ContentType)
	b = appendHeaders(b, p.Headers)
	b = appendU64(b, p.Published)
	b = appendOptBytes(b, p.PartitionKey)
	b = appendU64(b, p.PartitioningVersion)
	return appendBytes(b, p.Payload)
}

// Decode parses an FPD1 body.
func (p *PublishDelayed) Decode(b []byte) error {
	var r reader
	r.begin(b, OpPublishDelayed)
	for r.next() {
		p.read(&r)
	}
	return r.result()
}

func (p *PublishDelayed) read(r *reader) {
	r.magic(magicPublishDelayed)
	p.Topic = r.str("topic")
	p.Group = r.optStr("group")
	p.Partition = r.u32("partition")
	p.RequireConfirm = r.boolean("require_confirm")
	p.NotBefore = r.u64("not_before")
	p.ContentType = r.contentType("content_type")
	p.Headers = r.headers("headers", p.Headers)
	p.Published = r.u64("published")
	p.PartitionKey = r.optBytes("partition_key")
	p.PartitioningVersion = r.u64("partitioning_version")
	p.Payload = r.bytes("payload")
	r.end()
}

// PublishOK is the PUBLISH_OK body (op 25).
type PublishOK struct {
	Offset uint64 // queue offset, or record offset for a stream
}

// AppendTo appends the FPO1 body.
func (p *PublishOK) AppendTo(b []byte) []byte {
	return appendU64(append(b, magicPublishOK...), p.Offset)
}

// Decode parses an FPO1 body.
func (p *PublishOK) Decode(b []byte) error {
	var r reader
	r.begin(b, OpPublishOK)
	for r.next() {
		r.magic(magicPublishOK)
		p.Offset = r.u64("offset")
		r.end()
	}
	return r.result()
}

// Deliver is the DELIVER push (op 40, docs/protocol.md#subscriptions). For streams Group is
// absent and DeliveryTag equals Offset.
type Deliver struct {
	SubID           uint64
	Topic           string
	Group           Option[string]
	Partition       uint32
	Offset          uint64
	DeliveryTag     uint64
	Published       uint64 // producer's value, echoed
	PublishReceived uint64 // broker clock at receipt, unix ms
	ContentType     ContentType
	Headers         Headers
	Payload         []byte // aliases the decoded buffer
}

// AppendTo appends the FDL1 body.
func (d *Deliver) AppendTo(b []byte) []byte {
	b = append(b, magicDeliver...)
	b = appendU64(b, d.SubID)
	b = appendStr(b, d.Topic)
	b = appendOptStr(b, d.Group)
	b = appendU32(b, d.Partition)
	b = appendU64(b, d.Offset)
	b = appendU64(b, d.DeliveryTag)
	b = appendU64(b, d.Published)
	b = appendU64(b, d.PublishReceived)
	b = appendContentType(b, d.ContentType)
	b = appendHeaders(b, d.Headers)
	return appendBytes(b, d.Payload)
}

// Decode parses an FDL1 body.
func (d *Deliver) Decode(b []byte) error {
	var r reader
	r.begin(b, OpDeliver)
	for r.next() {
		d.read(&r)
	}
	return r.result()
}

func (d *Deliver) read(r *reader) {
	r.magic(magicDeliver)
	d.SubID = r.u64("sub_id")
	d.Topic = r.str("topic")
	d.Group = r.optStr("group")
	d.Partition = r.u32("partition")
	d.Offset = r.u64("offset")
	d.DeliveryTag = r.u64("delivery_tag")
	d.Published = r.u64("published")
	d.PublishReceived = r.u64("publish_received")
	d.ContentType = r.contentType("content_type")
	d.Headers = r.headers("headers", d.Headers)
	d.Payload = r.bytes("payload")
	r.end()
}

// Ack is the ACK body (op 41, docs/protocol.md#subscriptions). The subscription is identified
// by (topic, partition, group), not by sub_id.
type Ack struct {
	Topic     string
	Group     Option[string]
	Partition uint32
	Tags      []uint64
}

// AppendTo appends the FAK1 body.
func (a *Ack) AppendTo(b []byte) []byte {
	b = append(b, magicAck...)
	b = appendStr(b, a.Topic)
	b = appendOptStr(b, a.Group)
	b = appendU32(b, a.Partition)
	return appendU64List(b, a.Tags)
}

// Decode parses an FAK1 body.
func (a *Ack) Decode(b []byte) error {
	var r reader
	r.begin(b, OpAck)
	for r.next() {
		r.magic(magicAck)
		a.Topic = r.str("topic")
		a.Group = r.optStr("group")
		a.Partition = r.u32("partition")
		a.Tags = r.u64List("tags", a.Tags)
		r.end()
	}
	return r.result()
}

// Nack is the NACK body (op 42, docs/protocol.md#subscriptions). NotBefore is only valid with
// Requeue; that rule is checked by the broker, not the decoder.
type Nack struct {
	Topic     string
	Group     Option[string]
	Partition uint32
	Tags      []uint64
	Requeue   bool
	NotBefore Option[uint64] // absolute unix ms
}

// AppendTo appends the FNK1 body.
func (n *Nack) AppendTo(b []byte) []byte {
	b = append(b, magicNack...)
	b = appendStr(b, n.Topic)
	b = appendOptStr(b, n.Group)
	b = appendU32(b, n.Partition)
	b = appendU64List(b, n.Tags)
	b = appendBool(b, n.Requeue)
	return appendOptU64(b, n.NotBefore)
}

// Decode parses an FNK1 body.
func (n *Nack) Decode(b []byte) error {
	var r reader
	r.begin(b, OpNack)
	for r.next() {
		r.magic(magicNack)
		n.Topic = r.str("topic")
		n.Group = r.optStr("group")
		n.Partition = r.u32("partition")
		n.Tags = r.u64List("tags", n.Tags)
		n.Requeue = r.boolean("requeue")
		n.NotBefore = r.optU64("not_before")
		r.end()
	}
	return r.result()
}
