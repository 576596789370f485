package wire

import "strconv"

// enumString renders a closed-enum value: its table name, or Type(n) when
// the value is outside the table (only reachable for values built in code,
// since decoders reject them).
func enumString(names []string, typ string, v int) string {
	if v >= 0 && v < len(names) {
		return names[v]
	}
	return typ + "(" + strconv.Itoa(v) + ")"
}

// ResumeOutcome is the HELLO_OK resume_outcome enum8 (docs/protocol.md#resume).
type ResumeOutcome uint8

const (
	ResumeNew                 ResumeOutcome = 0
	ResumeResumed             ResumeOutcome = 1
	ResumeNotFound            ResumeOutcome = 2
	ResumeRejected            ResumeOutcome = 3
	ResumeResumedAfterRestart ResumeOutcome = 4
)

var resumeOutcomeNames = []string{"new", "resumed", "resume_not_found", "resume_rejected", "resumed_after_restart"}

func (v ResumeOutcome) String() string {
	return enumString(resumeOutcomeNames, "ResumeOutcome", int(v))
}

// Valid reports whether v is in the table.
func (v ResumeOutcome) Valid() bool { return int(v) < len(resumeOutcomeNames) }

// ReconcilePolicy is the RECONCILE_CLIENT policy enum8 (docs/protocol.md#reconcile).
type ReconcilePolicy uint8

const (
	ReconcileConservative ReconcilePolicy = 0
	ReconcileRestore      ReconcilePolicy = 1
)

var reconcilePolicyNames = []string{"conservative", "restore"}

func (v ReconcilePolicy) String() string {
	return enumString(reconcilePolicyNames, "ReconcilePolicy", int(v))
}

// Valid reports whether v is in the table.
func (v ReconcilePolicy) Valid() bool { return int(v) < len(reconcilePolicyNames) }

// ReconcileAction is the RECONCILE_RESULT entry action enum8.
type ReconcileAction uint8

const (
	ActionKeep               ReconcileAction = 0
	ActionCloseClientSide    ReconcileAction = 1
	ActionCloseServerSide    ReconcileAction = 2
	ActionRecreateClientSide ReconcileAction = 3
)

var reconcileActionNames = []string{"keep", "close_client_side", "close_server_side", "recreate_client_side"}

func (v ReconcileAction) String() string {
	return enumString(reconcileActionNames, "ReconcileAction", int(v))
}

// Valid reports whether v is in the table.
func (v ReconcileAction) Valid() bool { return int(v) < len(reconcileActionNames) }

// Durability is the DECLARE_PLEXUS durability enum8.
type Durability uint8

const (
	DurabilityEphemeral   Durability = 0
	DurabilitySpeculative Durability = 1
	DurabilityDurable     Durability = 2
)

var durabilityNames = []string{"ephemeral", "speculative", "durable"}

func (v Durability) String() string { return enumString(durabilityNames, "Durability", int(v)) }

// Valid reports whether v is in the table.
func (v Durability) Valid() bool { return int(v) < len(durabilityNames) }

// StreamStartKind is the StreamStart kind enum8.
type StreamStartKind uint8

const (
	StartLatest   StreamStartKind = 0
	StartEarliest StreamStartKind = 1
	StartOffset   StreamStartKind = 2
	StartNBack    StreamStartKind = 3
	StartByTime   StreamStartKind = 4
)

var streamStartKindNames = []string{"latest", "earliest", "offset", "n_back", "by_time"}

func (v StreamStartKind) String() string {
	return enumString(streamStartKindNames, "StreamStartKind", int(v))
}

// Valid reports whether v is in the table.
func (v StreamStartKind) Valid() bool { return int(v) < len(streamStartKindNames) }

// HasValue reports whether the kind is followed by a u64 on the wire
// (offset, n_back, by_time).
func (v StreamStartKind) HasValue() bool { return v >= StartOffset }

// DLQKind is the DlqPolicy kind enum8.
type DLQKind uint8

const (
	DLQDiscard   DLQKind = 0 // drop dead letters
	DLQBrokerDLQ DLQKind = 1 // route to the broker-wide DLQ
	DLQNamed     DLQKind = 2 // route to a named queue (topic, group)
)

var dlqKindNames = []string{"discard", "broker_dlq", "named"}

func (v DLQKind) String() string { return enumString(dlqKindNames, "DLQKind", int(v)) }

// Valid reports whether v is in the table.
func (v DLQKind) Valid() bool { return int(v) < len(dlqKindNames) }

// Reason is the reason code (docs/protocol.md#reason-codes) shared by RECONCILE_RESULT and
// SUBSCRIPTION_CLOSED. It is an open enum: decoders keep unknown values.
type Reason uint16

const (
	ReasonUnspecified         Reason = 0
	ReasonMatched             Reason = 1
	ReasonServerIDChanged     Reason = 2
	ReasonServerRestored      Reason = 3
	ReasonServerMismatch      Reason = 4
	ReasonServerRestoreFailed Reason = 5
	ReasonServerMissing       Reason = 6
	ReasonClientMissing       Reason = 7
	ReasonRecreate            Reason = 8
	ReasonTopicDeleted        Reason = 20
	ReasonOwnerMoved          Reason = 21
	ReasonBrokerShutdown      Reason = 22
	ReasonCohortRemoved       Reason = 23
	ReasonLagged              Reason = 24
	ReasonServerError         Reason = 40
)

var reasonNames = map[Reason]string{
	ReasonUnspecified:         "unspecified",
	ReasonMatched:             "matched",
	ReasonServerIDChanged:     "server_id_changed",
	ReasonServerRestored:      "server_restored",
	ReasonServerMismatch:      "server_mismatch",
	ReasonServerRestoreFailed: "server_restore_failed",
	ReasonServerMissing:       "server_missing",
	ReasonClientMissing:       "client_missing",
	ReasonRecreate:            "recreate",
	ReasonTopicDeleted:        "topic_deleted",
	ReasonOwnerMoved:          "owner_moved",
	ReasonBrokerShutdown:      "broker_shutdown",
	ReasonCohortRemoved:       "cohort_removed",
	ReasonLagged:              "lagged",
	ReasonServerError:         "server_error",
}

// String returns the reason's name (docs/protocol.md#reason-codes), or
// "reason(N)" for a value not in the table.
func (r Reason) String() string {
	if s, ok := reasonNames[r]; ok {
		return s
	}
	return "reason(" + strconv.Itoa(int(r)) + ")"
}

// Known reports whether r is one of the named codes (docs/protocol.md#reason-codes).
func (r Reason) Known() bool {
	_, ok := reasonNames[r]
	return ok
}
