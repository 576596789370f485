package wire

// Reconcile bodies: RECONCILE_CLIENT, RECONCILE_SERVER, RECONCILE_RESULT
// (docs/protocol.md#reconcile).

const (
	magicReconcileClient = "FRC1"
	magicReconcileServer = "FRS1"
	magicReconcileResult = "FRR1"

	// sub_id, topic len, partition, group tag, auto_ack, prefetch, and the
	// three option tags.
	minReconcileSubSize = 8 + 4 + 4 + 1 + 1 + 4 + 1 + 1 + 1
	// client tag, server tag, action, reason len. The codes tail is not
	// counted: it may be missing.
	minReconcileEntrySize = 1 + 1 + 1 + 4
)

// ReconcileSub describes one queue subscription in the reconcile exchange.
// Unlike SUBSCRIBE, auto_ack comes before prefetch.
type ReconcileSub struct {
	SubID          uint64
	Topic          string
	Partition      uint32
	Group          Option[string]
	AutoAck        bool
	Prefetch       uint32
	ConsumerGroup  Option[string]
	ConsumerTarget Option[uint32]
	MemberID       Option[UUID]
}

func (s *ReconcileSub) appendTo(b []byte) []byte {
	b = appendU64(b, s.SubID)
	b = appendStr(b, s.Topic)
	b = appendU32(b, s.Partition)
	b = appendOptStr(b, s.Group)
	b = appendBool(b, s.AutoAck)
	b = appendU32(b, s.Prefetch)
	b = appendOptStr(b, s.ConsumerGroup)
	b = appendOptU32(b, s.ConsumerTarget)
	return appendOptUUID(b, s.MemberID)
}

func (s *ReconcileSub) read(r *reader) {
	s.SubID = r.u64("sub_id")
	s.Topic = r.str("topic")
	s.Partition = r.u32("partition")
	s.Group = r.optStr("group")
	s.AutoAck = r.boolean("auto_ack")
	s.Prefetch = r.u32("prefetch")
	s.ConsumerGroup = r.optStr("consumer_group")
	s.ConsumerTarget = r.optU32("consumer_target")
	s.MemberID = r.optUUID("member_id")
}

func appendReconcileSubs(b []byte, subs []ReconcileSub) []byte {
	b = appendLen(b, len(subs))
	for i := range subs {
		b = subs[i].appendTo(b)
	}
	return b
}

func (r *reader) reconcileSubs(field string, subs []ReconcileSub) []ReconcileSub {
	subs = resize(subs, r.count(field, minReconcileSubSize))
	for i := range subs {
		subs[i].read(r)
	}
	return subs
}

// ReconcileClient is the RECONCILE_CLIENT body (op 70): the queue
// subscriptions the client still considers live on this endpoint.
type ReconcileClient struct {
	Policy        ReconcilePolicy
	Subscriptions []ReconcileSub
}

// AppendTo appends the FRC1 body.
func (c *ReconcileClient) AppendTo(b []byte) []byte {
	b = append(append(b, magicReconcileClient...), byte(c.Policy))
	return appendReconcileSubs(b, c.Subscriptions)
}

// Decode parses an FRC1 body. The policy is checked strictly, like the
// upstream broker (the Go SDK is lenient here).
func (c *ReconcileClient) Decode(b []byte) error {
	var r reader
	r.begin(b, OpReconcileClient)
	for r.next() {
		r.magic(magicReconcileClient)
		c.Policy = ReconcilePolicy(r.enum8("policy", uint8(len(reconcilePolicyNames))))
		c.Subscriptions = r.reconcileSubs("subscriptions", c.Subscriptions)
		r.end()
	}
	return r.result()
}

// ReconcileServer is the RECONCILE_SERVER body (op 71). Defined for
// completeness: upstream never sends it and SDKs ignore it.
type ReconcileServer struct {
	Subscriptions []ReconcileSub
}

// AppendTo appends the FRS1 body.
func (s *ReconcileServer) AppendTo(b []byte) []byte {
	return appendReconcileSubs(append(b, magicReconcileServer...), s.Subscriptions)
}

// Decode parses an FRS1 body.
func (s *ReconcileServer) Decode(b []byte) error {
	var r reader
	r.begin(b, OpReconcileServer)
	for r.next() {
		r.magic(magicReconcileServer)
		s.Subscriptions = r.reconcileSubs("subscriptions", s.Subscriptions)
		r.end()
	}
	return r.result()
}

// ReconcileEntry is one verdict of RECONCILE_RESULT (docs/protocol.md#reconcile). Code is
// the entry's reason code from the codes tail; on the wire all entries come
// first and all codes after them, but keeping the code with its entry makes
// a length mismatch unrepresentable.
type ReconcileEntry struct {
	Client Option[ReconcileSub] // absent for server-only subscriptions
	Server Option[ReconcileSub] // absent when the broker has none
	Action ReconcileAction
	Reason string // short label such as "matched"
	Code   Reason // reason code (docs/protocol.md#reason-codes); ReasonUnspecified when the tail is missing
}

// ReconcileResult is the RECONCILE_RESULT body (op 72). The
// per-entry codes form the tolerant tail: AppendTo always writes them
// (SDKs built before the tail existed still decode it); Decode accepts a body that stops before them, leaving every
// Code at ReasonUnspecified.
type ReconcileResult struct {
	Entries []ReconcileEntry
	// CodesPresent is set by Decode: whether the body carried the codes
	// tail (false means an old broker). AppendTo ignores it.
	CodesPresent bool
}

// AppendTo appends the FRR1 body, codes tail included.
func (res *ReconcileResult) AppendTo(b []byte) []byte {
	b = append(b, magicReconcileResult...)
	b = appendLen(b, len(res.Entries))
	for i := range res.Entries {
		e := &res.Entries[i]
		if e.Client.Present {
			b = e.Client.Value.appendTo(append(b, 1))
		} else {
			b = append(b, 0)
		}
		if e.Server.Present {
			b = e.Server.Value.appendTo(append(b, 1))
		} else {
			b = append(b, 0)
		}
		b = append(b, byte(e.Action))
		b = appendStr(b, e.Reason)
	}
	for i := range res.Entries {
		b = appendU16(b, uint16(res.Entries[i].Code))
	}
	return b
}

// Decode parses an FRR1 body, with or without the codes tail. If any byte
// follows the entries, the full tail of 2×N bytes must follow exactly.
func (res *ReconcileResult) Decode(b []byte) error {
	var r reader
	r.begin(b, OpReconcileResult)
	for r.next() {
		res.read(&r)
	}
	return r.result()
}

func (res *ReconcileResult) read(r *reader) {
	r.magic(magicReconcileResult)
	res.Entries = resize(res.Entries, r.count("entries", minReconcileEntrySize))
	for i := range res.Entries {
		e := &res.Entries[i]
		e.Client.Present = r.present("client")
		if e.Client.Present {
			e.Client.Value.read(r)
		} else {
			e.Client.Value = ReconcileSub{}
		}
		e.Server.Present = r.present("server")
		if e.Server.Present {
			e.Server.Value.read(r)
		} else {
			e.Server.Value = ReconcileSub{}
		}
		e.Action = ReconcileAction(r.enum8("action", uint8(len(reconcileActionNames))))
		e.Reason = r.str("reason")
	}
	res.CodesPresent = r.more()
	for i := range res.Entries {
		res.Entries[i].Code = ReasonUnspecified
		if res.CodesPresent {
			res.Entries[i].Code = Reason(r.u16("codes"))
		}
	}
	r.end()
}
