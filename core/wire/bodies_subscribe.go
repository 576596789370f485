package wire

// Subscription bodies: SUBSCRIBE, SUBSCRIBE_OK, SUBSCRIBE_STREAM,
// ASSIGNMENT_CHANGED and SUBSCRIPTION_CLOSED (docs/protocol.md#subscriptions,
// docs/protocol.md#not-yet-served, docs/protocol.md#reason-codes). Queue keys
// here use the order topic, partition, group.

const (
	magicSubscribe          = "FSB1"
	magicSubscribeOK        = "FSO1"
	magicSubscribeStream    = "FSP1"
	magicAssignmentChanged  = "FAC1"
	magicSubscriptionClosed = "FSC1"
)

// Subscribe is the queue SUBSCRIBE body (op 30). Note prefetch comes
// before auto_ack here, the opposite of ReconcileSub.
type Subscribe struct {
	Topic          string
	Partition      uint32
	Group          Option[string]
	Prefetch       uint32
	AutoAck        bool
	ConsumerGroup  Option[string] // exclusive cohort id (docs/protocol.md#not-yet-served)
	ConsumerTarget Option[uint32] // soft cap on partitions wanted
	MemberID       Option[UUID]   // absent on the first exclusive subscribe
}

// AppendTo appends the FSB1 body.
func (s *Subscribe) AppendTo(b []byte) []byte {
	b = append(b, magicSubscribe...)
	b = appendStr(b, s.Topic)
	b = appendU32(b, s.Partition)
	b = appendOptStr(b, s.Group)
	b = appendU32(b, s.Prefetch)
	b = appendBool(b, s.AutoAck)
	b = appendOptStr(b, s.ConsumerGroup)
	b = appendOptU32(b, s.ConsumerTarget)
	return appendOptUUID(b, s.MemberID)
}

// Decode parses an FSB1 body.
func (s *Subscribe) Decode(b []byte) error {
	var r reader
	r.begin(b, OpSubscribe)
	for r.next() {
		r.magic(magicSubscribe)
		s.Topic = r.str("topic")
		s.Partition = r.u32("partition")
		s.Group = r.optStr("group")
		s.Prefetch = r.u32("prefetch")
		s.AutoAck = r.boolean("auto_ack")
		s.ConsumerGroup = r.optStr("consumer_group")
		s.ConsumerTarget = r.optU32("consumer_target")
		s.MemberID = r.optUUID("member_id")
		r.end()
	}
	return r.result()
}

// SubscribeOK is the SUBSCRIBE_OK body (op 31), answering both
// SUBSCRIBE and SUBSCRIBE_STREAM. It has no auto_ack field.
type SubscribeOK struct {
	SubID          uint64
	Topic          string
	Partition      uint32
	Group          Option[string] // always absent for streams
	Prefetch       uint32         // echo of the request, unclamped
	ConsumerGroup  Option[string]
	ConsumerTarget Option[uint32]
	MemberID       Option[UUID] // present iff the subscription is exclusive
}

// AppendTo appends the FSO1 body.
func (s *SubscribeOK) AppendTo(b []byte) []byte {
	b = append(b, magicSubscribeOK...)
	b = appendU64(b, s.SubID)
	b = appendStr(b, s.Topic)
	b = appendU32(b, s.Partition)
	b = appendOptStr(b, s.Group)
	b = appendU32(b, s.Prefetch)
	b = appendOptStr(b, s.ConsumerGroup)
	b = appendOptU32(b, s.ConsumerTarget)
	return appendOptUUID(b, s.MemberID)
}

// Decode parses an FSO1 body.
func (s *SubscribeOK) Decode(b []byte) error {
	var r reader
	r.begin(b, OpSubscribeOK)
	for r.next() {
		r.magic(magicSubscribeOK)
		s.SubID = r.u64("sub_id")
		s.Topic = r.str("topic")
		s.Partition = r.u32("partition")
		s.Group = r.optStr("group")
		s.Prefetch = r.u32("prefetch")
		s.ConsumerGroup = r.optStr("consumer_group")
		s.ConsumerTarget = r.optU32("consumer_target")
		s.MemberID = r.optUUID("member_id")
		r.end()
	}
	return r.result()
}

// StreamStart is the start position: a kind, plus Value for the
// offset, n_back and by_time kinds only (latest and earliest carry no value
// bytes, and Value is ignored when encoding them).
type StreamStart struct {
	Kind  StreamStartKind
	Value uint64
}

func (s StreamStart) appendTo(b []byte) []byte {
	b = append(b, byte(s.Kind))
	if s.Kind.HasValue() {
		b = appendU64(b, s.Value)
	}
	return b
}

func (r *reader) streamStart(field string) StreamStart {
	k := StreamStartKind(r.enum8(field, uint8(len(streamStartKindNames))))
	if k.HasValue() {
		return StreamStart{Kind: k, Value: r.u64(field)}
	}
	return StreamStart{Kind: k}
}

// FilterClause is one SUBSCRIBE_STREAM header filter (docs/protocol.md#not-yet-served): the
// record must carry header Key with a value matching Pattern ('*' globs).
type FilterClause struct {
	Key     string
	Pattern string
}

// SubscribeStream is the SUBSCRIBE_STREAM body (op 64, docs/protocol.md#not-yet-served).
type SubscribeStream struct {
	Topic       string
	Partition   uint32
	DurableName Option[string] // absent = ephemeral subscription
	Start       StreamStart    // ignored by the broker when DurableName is set
	Filter      []FilterClause // AND of clauses, order preserved
	Prefetch    uint32
	AutoAck     bool
}

// AppendTo appends the FSP1 body.
func (s *SubscribeStream) AppendTo(b []byte) []byte {
	b = append(b, magicSubscribeStream...)
	b = appendStr(b, s.Topic)
	b = appendU32(b, s.Partition)
	b = appendOptStr(b, s.DurableName)
	b = s.Start.appendTo(b)
	b = appendLen(b, len(s.Filter))
	for _, c := range s.Filter {
		b = appendStr(b, c.Key)
		b = appendStr(b, c.Pattern)
	}
	b = appendU32(b, s.Prefetch)
	return appendBool(b, s.AutoAck)
}

// Decode parses an FSP1 body (as SUBSCRIBE_STREAM; op 95 shares the magic
// but not the layout).
func (s *SubscribeStream) Decode(b []byte) error {
	var r reader
	r.begin(b, OpSubscribeStream)
	for r.next() {
		r.magic(magicSubscribeStream)
		s.Topic = r.str("topic")
		s.Partition = r.u32("partition")
		s.DurableName = r.optStr("durable_name")
		s.Start = r.streamStart("start")
		s.Filter = resize(s.Filter, r.count("filter", 8))
		for i := range s.Filter {
			s.Filter[i].Key = r.str("filter")
			s.Filter[i].Pattern = r.str("filter")
		}
		s.Prefetch = r.u32("prefetch")
		s.AutoAck = r.boolean("auto_ack")
		r.end()
	}
	return r.result()
}

// AssignmentChanged is the ASSIGNMENT_CHANGED push (op 43, docs/protocol.md#not-yet-served).
// Assigned is the member's full partition set; Added and Revoked are the
// change since the previous notice.
type AssignmentChanged struct {
	Topic         string
	Group         Option[string]
	ConsumerGroup string // cohort id; not optional here
	Generation    uint64 // grows with each rebalance; drop stale notices
	Assigned      []uint32
	Added         []uint32
	Revoked       []uint32
}

// AppendTo appends the FAC1 body.
func (a *AssignmentChanged) AppendTo(b []byte) []byte {
	b = append(b, magicAssignmentChanged...)
	b = appendStr(b, a.Topic)
	b = appendOptStr(b, a.Group)
	b = appendStr(b, a.ConsumerGroup)
	b = appendU64(b, a.Generation)
	b = appendU32List(b, a.Assigned)
	b = appendU32List(b, a.Added)
	return appendU32List(b, a.Revoked)
}

// Decode parses an FAC1 body.
func (a *AssignmentChanged) Decode(b []byte) error {
	var r reader
	r.begin(b, OpAssignmentChanged)
	for r.next() {
		r.magic(magicAssignmentChanged)
		a.Topic = r.str("topic")
		a.Group = r.optStr("group")
		a.ConsumerGroup = r.str("consumer_group")
		a.Generation = r.u64("generation")
		a.Assigned = r.u32List("assigned", a.Assigned)
		a.Added = r.u32List("added", a.Added)
		a.Revoked = r.u32List("revoked", a.Revoked)
		r.end()
	}
	return r.result()
}

// SubscriptionClosed is the SUBSCRIPTION_CLOSED push (op 104, docs/protocol.md#reason-codes).
type SubscriptionClosed struct {
	SubID   uint64
	Code    Reason // open enum: unknown values are kept
	Message string
}

// AppendTo appends the FSC1 body.
func (s *SubscriptionClosed) AppendTo(b []byte) []byte {
	b = append(b, magicSubscriptionClosed...)
	b = appendU64(b, s.SubID)
	b = appendU16(b, uint16(s.Code))
	return appendStr(b, s.Message)
}

// Decode parses an FSC1 body.
func (s *SubscriptionClosed) Decode(b []byte) error {
	var r reader
	r.begin(b, OpSubscriptionClosed)
	for r.next() {
		r.magic(magicSubscriptionClosed)
		s.SubID = r.u64("sub_id")
		s.Code = Reason(r.u16("code"))
		s.Message = r.str("message")
		r.end()
	}
	return r.result()
}
