package wire

import "strconv"

// Op is a frame opcode (docs/protocol.md#extensions).
type Op uint16

// Client-facing ops.
const (
	OpHello              Op = 1
	OpHelloOK            Op = 2
	OpHelloErr           Op = 3
	OpAuth               Op = 10
	OpAuthOK             Op = 11
	OpAuthErr            Op = 12
	OpPublish            Op = 20
	OpPublishDelayed     Op = 21
	OpPublishOK          Op = 25
	OpSubscribe          Op = 30
	OpSubscribeOK        Op = 31
	OpSubscribeErr       Op = 32
	OpDeliver            Op = 40
	OpAck                Op = 41
	OpNack               Op = 42
	OpAssignmentChanged  Op = 43
	OpPing               Op = 50
	OpPong               Op = 51
	OpDeclareQueue       Op = 60
	OpDeclareQueueOK     Op = 61
	OpDeclarePlexus      Op = 62
	OpDeclarePlexusOK    Op = 63
	OpSubscribeStream    Op = 64
	OpReconcileClient    Op = 70
	OpReconcileServer    Op = 71
	OpReconcileResult    Op = 72
	OpTopology           Op = 90
	OpTopologyOK         Op = 91
	OpRedirect           Op = 92
	OpTopologyUpdate     Op = 101
	OpTopologyUpdateAck  Op = 102
	OpGoingAway          Op = 103
	OpSubscriptionClosed Op = 104
	OpError              Op = 255
)

// Node-only replication ops (docs/protocol.md#replication-ops); their
// bodies are in bodies_replication.go.
const (
	OpReplicationRead                Op = 80
	OpReplicationReadOK              Op = 81
	OpReplicationApply               Op = 82
	OpReplicationApplyOK             Op = 83
	OpReplicationCheckpointExport    Op = 84
	OpReplicationCheckpointExportOK  Op = 85
	OpReplicationCheckpointInstall   Op = 86
	OpReplicationCheckpointInstallOK Op = 87
	OpReplicationStreamStart         Op = 93
	OpReplicationStreamBatch         Op = 94
	OpReplicationStreamProgress      Op = 95
	OpReplicationStreamReset         Op = 96
	OpReplicationStreamStop          Op = 97
	OpReplicationStreamEnd           Op = 98
	OpStreamReplicationRead          Op = 99
	OpStreamReplicationReadOK        Op = 100
)

// This project's extension ops (docs/protocol.md#extensions).
const (
	OpForwardedSession   Op = 200
	OpForwardedSessionOK Op = 201
	OpNodeAdmin          Op = 202
	OpNodeAdminOK        Op = 203
)

// opInfo is one row of the table that the codec needs.
type opInfo struct {
	name     string
	magic    string // "" for ops whose body is empty
	nodeOnly bool
}

// ops is indexed by op code; every defined op has a non-empty name. All
// defined codes are below 256, so an array keeps lookups branch-free.
var ops = [256]opInfo{
	OpHello:              {"HELLO", "FHL1", false},
	OpHelloOK:            {"HELLO_OK", "FHO1", false},
	OpHelloErr:           {"HELLO_ERR", "FER1", false},
	OpAuth:               {"AUTH", "FAU1", false},
	OpAuthOK:             {"AUTH_OK", "", false},
	OpAuthErr:            {"AUTH_ERR", "FER1", false},
	OpPublish:            {"PUBLISH", "FPB1", false},
	OpPublishDelayed:     {"PUBLISH_DELAYED", "FPD1", false},
	OpPublishOK:          {"PUBLISH_OK", "FPO1", false},
	OpSubscribe:          {"SUBSCRIBE", "FSB1", false},
	OpSubscribeOK:        {"SUBSCRIBE_OK", "FSO1", false},
	OpSubscribeErr:       {"SUBSCRIBE_ERR", "FER1", false},
	OpDeliver:            {"DELIVER", "FDL1", false},
	OpAck:                {"ACK", "FAK1", false},
	OpNack:               {"NACK", "FNK1", false},
	OpAssignmentChanged:  {"ASSIGNMENT_CHANGED", "FAC1", false},
	OpPing:               {"PING", "", false},
	OpPong:               {"PONG", "", false},
	OpDeclareQueue:       {"DECLARE_QUEUE", "FDQ1", false},
	OpDeclareQueueOK:     {"DECLARE_QUEUE_OK", "FDK1", false},
	OpDeclarePlexus:      {"DECLARE_PLEXUS", "FDP1", false},
	OpDeclarePlexusOK:    {"DECLARE_PLEXUS_OK", "FPK1", false},
	OpSubscribeStream:    {"SUBSCRIBE_STREAM", "FSP1", false},
	OpReconcileClient:    {"RECONCILE_CLIENT", "FRC1", false},
	OpReconcileServer:    {"RECONCILE_SERVER", "FRS1", false},
	OpReconcileResult:    {"RECONCILE_RESULT", "FRR1", false},
	OpTopology:           {"TOPOLOGY", "FTP1", false},
	OpTopologyOK:         {"TOPOLOGY_OK", "FTO1", false},
	OpRedirect:           {"REDIRECT", "FRD1", false},
	OpTopologyUpdate:     {"TOPOLOGY_UPDATE", "FTU1", false},
	OpTopologyUpdateAck:  {"TOPOLOGY_UPDATE_ACK", "FTA1", false},
	OpGoingAway:          {"GOING_AWAY", "FGA1", false},
	OpSubscriptionClosed: {"SUBSCRIPTION_CLOSED", "FSC1", false},
	OpError:              {"ERROR", "FER1", false},

	OpReplicationRead:                {"REPLICATION_READ", "FRQ1", true},
	OpReplicationReadOK:              {"REPLICATION_READ_OK", "FRR2", true},
	OpReplicationApply:               {"REPLICATION_APPLY", "FRA1", true},
	OpReplicationApplyOK:             {"REPLICATION_APPLY_OK", "FAO1", true},
	OpReplicationCheckpointExport:    {"REPLICATION_CHECKPOINT_EXPORT", "FCE1", true},
	OpReplicationCheckpointExportOK:  {"REPLICATION_CHECKPOINT_EXPORT_OK", "FCO1", true},
	OpReplicationCheckpointInstall:   {"REPLICATION_CHECKPOINT_INSTALL", "FCI1", true},
	OpReplicationCheckpointInstallOK: {"REPLICATION_CHECKPOINT_INSTALL_OK", "FCK1", true},
	OpReplicationStreamStart:         {"REPLICATION_STREAM_START", "FSS1", true},
	OpReplicationStreamBatch:         {"REPLICATION_STREAM_BATCH", "FSB1", true},
	OpReplicationStreamProgress:      {"REPLICATION_STREAM_PROGRESS", "FSP1", true},
	OpReplicationStreamReset:         {"REPLICATION_STREAM_RESET", "FSR1", true},
	OpReplicationStreamStop:          {"REPLICATION_STREAM_STOP", "", true},
	OpReplicationStreamEnd:           {"REPLICATION_STREAM_END", "FSE1", true},
	OpStreamReplicationRead:          {"STREAM_REPLICATION_READ", "FSQ1", true},
	OpStreamReplicationReadOK:        {"STREAM_REPLICATION_READ_OK", "FSR1", true},

	// FORWARDED_SESSION accepts FFS1 or FFS2; the table lists the v1 magic.
	OpForwardedSession:   {"FORWARDED_SESSION", "FFS1", true},
	OpForwardedSessionOK: {"FORWARDED_SESSION_OK", "FFO1", true},
	OpNodeAdmin:          {"NODE_ADMIN", "FNA1", true},
	OpNodeAdminOK:        {"NODE_ADMIN_OK", "FNO1", true},
}

func (o Op) info() (opInfo, bool) {
	if int(o) >= len(ops) || ops[o].name == "" {
		return opInfo{}, false
	}
	return ops[o], true
}

// String returns the spec name of the op ("PUBLISH"), or "op(123)" for an
// unknown code, so logs and error messages stay readable either way.
func (o Op) String() string {
	if in, ok := o.info(); ok {
		return in.name
	}
	return "op(" + strconv.FormatUint(uint64(o), 10) + ")"
}

// Known reports whether the op is one of the 50 upstream ops or the two
// docs/protocol.md#extensions extension ops.
func (o Op) Known() bool {
	_, ok := o.info()
	return ok
}

// NodeOnly reports whether the op is spoken only between brokers: the
// replication ops (80–87, 93–100) and FORWARDED_SESSION(_OK) (200, 201).
// TOPOLOGY (90), TOPOLOGY_OK (91) and REDIRECT (92) sit inside the 80–100
// range numerically but are client-facing, so they are not node-only.
// The session layer answers node-only ops from a principal other than
// @node with ERROR 403 (docs/protocol.md#answers, docs/protocol.md#replication-ops).
func (o Op) NodeOnly() bool {
	in, ok := o.info()
	return ok && in.nodeOnly
}

// EmptyBody reports whether the op's body is always empty (AUTH_OK, PING,
// PONG, REPLICATION_STREAM_STOP).
func (o Op) EmptyBody() bool {
	in, ok := o.info()
	return ok && in.magic == ""
}
