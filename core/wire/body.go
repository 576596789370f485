package wire

import (
	"errors"
	"fmt"
)

// Encoder is implemented by every body: AppendTo appends the magic and the
// fields in wire order and returns the extended slice.
type Encoder interface {
	AppendTo(dst []byte) []byte
}

// Body is a decodable and encodable message body. Decode parses a complete
// body (magic included, frame header excluded) into the receiver, reusing
// its slices' capacity; see the package documentation for the ownership of
// decoded byte slices.
type Body interface {
	Encoder
	Decode(b []byte) error
}

// NewBody returns a fresh zero body for op: every client-facing op
// (the FER1 ops share ErrorBody; AUTH_OK, PING and PONG get Empty), the
// node-only replication ops (docs/protocol.md#replication-ops;
// REPLICATION_STREAM_STOP gets Empty) and the forwarding ops
// (docs/protocol.md#extensions). Unknown ops return false. It exists for
// generic decoding, fuzzing and debug tools; hot paths should decode into
// a reused concrete body instead.
func NewBody(op Op) (Body, bool) {
	switch op {
	case OpHello:
		return new(Hello), true
	case OpHelloOK:
		return new(HelloOK), true
	case OpHelloErr, OpAuthErr, OpSubscribeErr, OpError:
		return new(ErrorBody), true
	case OpAuth:
		return new(Auth), true
	case OpAuthOK, OpPing, OpPong:
		return new(Empty), true
	case OpPublish:
		return new(Publish), true
	case OpPublishDelayed:
		return new(PublishDelayed), true
	case OpPublishOK:
		return new(PublishOK), true
	case OpSubscribe:
		return new(Subscribe), true
	case OpSubscribeOK:
		return new(SubscribeOK), true
	case OpDeliver:
		return new(Deliver), true
	case OpAck:
		return new(Ack), true
	case OpNack:
		return new(Nack), true
	case OpAssignmentChanged:
		return new(AssignmentChanged), true
	case OpDeclareQueue:
		return new(DeclareQueue), true
	case OpDeclareQueueOK:
		return new(DeclareQueueOK), true
	case OpDeclarePlexus:
		return new(DeclarePlexus), true
	case OpDeclarePlexusOK:
		return new(DeclarePlexusOK), true
	case OpSubscribeStream:
		return new(SubscribeStream), true
	case OpReconcileClient:
		return new(ReconcileClient), true
	case OpReconcileServer:
		return new(ReconcileServer), true
	case OpReconcileResult:
		return new(ReconcileResult), true
	case OpTopology:
		return new(TopologyRequest), true
	case OpTopologyOK:
		return new(TopologyOK), true
	case OpRedirect:
		return new(Redirect), true
	case OpTopologyUpdate:
		return new(TopologyUpdate), true
	case OpTopologyUpdateAck:
		return new(TopologyUpdateAck), true
	case OpGoingAway:
		return new(GoingAway), true
	case OpSubscriptionClosed:
		return new(SubscriptionClosed), true
	case OpReplicationRead:
		return new(ReplicationRead), true
	case OpReplicationReadOK:
		return new(ReplicationReadOK), true
	case OpReplicationApply:
		return new(ReplicationApply), true
	case OpReplicationApplyOK:
		return new(ReplicationApplyOK), true
	case OpReplicationCheckpointExport:
		return new(ReplicationCheckpointExport), true
	case OpReplicationCheckpointExportOK:
		return new(ReplicationCheckpointExportOK), true
	case OpReplicationCheckpointInstall:
		return new(ReplicationCheckpointInstall), true
	case OpReplicationCheckpointInstallOK:
		return new(ReplicationCheckpointInstallOK), true
	case OpReplicationStreamStart:
		return new(ReplicationStreamStart), true
	case OpReplicationStreamBatch:
		return new(ReplicationStreamBatch), true
	case OpReplicationStreamProgress:
		return new(ReplicationStreamProgress), true
	case OpReplicationStreamReset:
		return new(ReplicationStreamReset), true
	case OpReplicationStreamStop:
		return new(Empty), true
	case OpReplicationStreamEnd:
		return new(ReplicationStreamEnd), true
	case OpStreamReplicationRead:
		return new(StreamReplicationRead), true
	case OpStreamReplicationReadOK:
		return new(StreamReplicationReadOK), true
	case OpForwardedSession:
		return new(ForwardedSession), true
	case OpForwardedSessionOK:
		return new(ForwardedSessionOK), true
	case OpNodeAdmin:
		return new(NodeAdmin), true
	case OpNodeAdminOK:
		return new(NodeAdminOK), true
	}
	return nil, false
}

// DecodeBody decodes b as the body of op into a fresh value. Unknown ops
// fail with ErrUnknownOp, a known op without a codec (none today) with
// ErrUnsupportedOp, and malformed bodies with a *DecodeError naming op (even for bodies
// shared by several ops, such as FER1).
func DecodeBody(op Op, b []byte) (Body, error) {
	body, ok := NewBody(op)
	if !ok {
		if op.Known() {
			return nil, fmt.Errorf("%w %v", ErrUnsupportedOp, op)
		}
		return nil, fmt.Errorf("%w %d", ErrUnknownOp, uint16(op))
	}
	if err := body.Decode(b); err != nil {
		var de *DecodeError
		if errors.As(err, &de) {
			de.Op = op
		}
		return nil, err
	}
	return body, nil
}

// Empty is the body of AUTH_OK, PING, PONG and REPLICATION_STREAM_STOP:
// zero bytes, no magic.
// Decode rejects stray bytes; note that upstream never inspects PING/PONG
// bodies, so a session layer that wants to be as lenient should not
// decode them at all.
type Empty struct{}

// AppendTo appends nothing.
func (*Empty) AppendTo(dst []byte) []byte { return dst }

// Decode accepts only an empty body.
func (*Empty) Decode(b []byte) error {
	if len(b) != 0 {
		return &DecodeError{Op: OpPing, Offset: 0, Err: ErrTrailingBytes}
	}
	return nil
}
