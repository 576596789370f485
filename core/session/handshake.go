package session

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"time"

	"github.com/fibrilgo/fibril/core/wire"
)

// handshake reads the first frame and answers it (docs/protocol.md#handshake). On success
// the connection is attached to a session and HELLO_OK is queued as the
// first frame the writer will send. Failures are written directly (the
// writer is not running yet) and end the connection.
func (c *Conn) handshake() bool {
	opts := &c.srv.opts
	_ = c.nc.SetReadDeadline(opts.Now().Add(opts.FirstFrame)) // S-14
	h, body, err := wire.ReadFrame(c.br, nil, opts.maxBody())
	if err != nil {
		var tooBig *wire.FrameTooLargeError
		if errors.As(err, &tooBig) {
			c.writeDirect(wire.OpError, h.RequestID, &wire.ErrorBody{Code: wire.CodeBadRequest, Message: frameTooLargeMsg(tooBig)})
		}
		return false
	}
	_ = c.nc.SetReadDeadline(time.Time{})
	c.lastRecv.Store(opts.Now().UnixNano())

	if h.Op != wire.OpHello {
		c.writeDirect(wire.OpError, h.RequestID, &wire.ErrorBody{Code: wire.CodeBadRequest,
			Message: "the first frame must be HELLO, got " + h.Op.String()})
		return false
	}
	var hello wire.Hello
	if err := hello.Decode(body); err != nil {
		c.writeDirect(wire.OpError, h.RequestID, &wire.ErrorBody{Code: wire.CodeBadRequest, Message: malformedHello(err)})
		return false
	}
	if hello.ProtocolVersion != wire.ProtocolVersion {
		c.writeDirect(wire.OpHelloErr, h.RequestID, &wire.ErrorBody{Code: wire.CodeUnsupportedVersion,
			Message: "unsupported protocol version " + itoa(uint64(hello.ProtocolVersion)) + "; this broker speaks 1"})
		return false
	}

	sess, outcome := c.srv.resolve(hello.Resume)
	switch {
	case outcome == wire.ResumeResumed && sess.needsNodeProof():
		// A node session: nothing carries over until AUTH proves @node
		// from the node it belongs to (proveNode); a user certificate
		// does not log in over it either.
		c.nodeProof = true
	case outcome == wire.ResumeResumed:
		c.principal = sess.authenticated() // the authenticated flag carries over (docs/protocol.md#resume)
	}
	if p, ok := c.certPrincipal(); ok && !c.nodeProof {
		c.principal = &p
		sess.setPrincipal(&p)
	}
	c.sess = sess
	c.log = c.log.With("client_id", sess.id.String(), "client", hello.ClientName)
	if !c.acquireSlot() {
		return false
	}
	c.enqueue(outFrame{op: wire.OpHelloOK, reqID: h.RequestID, slot: true, body: &wire.HelloOK{
		ProtocolVersion: wire.ProtocolVersion,
		OwnerID:         opts.OwnerID,
		ClientID:        sess.id,
		ResumeToken:     sess.token,
		ResumeOutcome:   outcome,
		ServerName:      opts.ServerName,
		Compliance:      wire.Compliance,
	}})
	if !c.nodeProof {
		sess.attach(c)
	}
	c.publishIdentity()
	c.log.Debug("hello", "outcome", outcome.String(), "client_version", hello.ClientVersion, "awaiting_node_proof", c.nodeProof)
	return true
}

// malformedHello is the answer to a HELLO that does not decode. The
// decoder's error (*wire.DecodeError) already reads "malformed HELLO: field
// …", so it is sent as it is; only an error that does not say what it is
// about gets the prefix.
func malformedHello(err error) string {
	var de *wire.DecodeError
	if errors.As(err, &de) {
		return err.Error()
	}
	return "malformed HELLO: " + err.Error()
}

// resolve maps a HELLO's resume identity to a session and its outcome
// (docs/protocol.md#resume, S-101, S-107). Every outcome other than resumed and
// resumed_after_restart gets fresh ids.
func (s *Server) resolve(resume wire.Option[wire.ResumeIdentity]) (*Session, wire.ResumeOutcome) {
	m := s.opts.Metrics
	r, ok := resume.Get()
	if !ok {
		m.ResumeNew.Inc()
		return s.newSession(), wire.ResumeNew
	}
	if r.OwnerID != s.opts.OwnerID {
		m.ResumeRejected.Inc()
		return s.newSession(), wire.ResumeRejected
	}
	if sess := s.sessions.get(r.ClientID); sess != nil {
		if subtle.ConstantTimeCompare(sess.token[:], r.ResumeToken[:]) != 1 {
			m.ResumeRejected.Inc()
			return s.newSession(), wire.ResumeRejected
		}
		if sess.resumable() {
			m.ResumeAccepted.Inc()
			return sess, wire.ResumeResumed
		}
	} else if s.skeletons.claim(r.ClientID, r.ResumeToken, s.opts.Settings().RestartTTL) {
		sess := newSession(s, r.ClientID, r.ResumeToken)
		s.sessions.add(sess)
		m.ResumeAccepted.Inc()
		return sess, wire.ResumeResumedAfterRestart
	}
	m.ResumeRejected.Inc()
	return s.newSession(), wire.ResumeNotFound
}

func (s *Server) newSession() *Session {
	sess := newSession(s, newUUIDv7(s.opts.Now()), newUUIDv4())
	s.sessions.add(sess)
	return sess
}

// resumable reports whether a resume may attach to the session: it has
// not ended (a grace expiry racing the resume loses only if it ran first).
func (s *Session) resumable() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.ended
}

// certPrincipal maps a verified client certificate to a user (S-154).
func (c *Conn) certPrincipal() (Principal, bool) {
	if c.tlsState == nil || len(c.tlsState.VerifiedChains) == 0 || c.srv.opts.CertAuth == nil {
		return Principal{}, false
	}
	return c.srv.opts.CertAuth(*c.tlsState)
}

// writeDirect writes one frame synchronously, before the writer runs.
func (c *Conn) writeDirect(op wire.Op, reqID uint64, body wire.Encoder) {
	_ = c.nc.SetWriteDeadline(c.srv.opts.Now().Add(c.srv.opts.FirstFrame))
	_, _ = c.nc.Write(wire.AppendFrame(nil, op, reqID, body))
}

// newUUIDv7 mints a time-ordered session id (RFC 9562 §5.7), as upstream
// does, so ids sort by creation in logs.
func newUUIDv7(now time.Time) wire.UUID {
	var u wire.UUID
	_, _ = rand.Read(u[6:])
	ms := uint64(now.UnixMilli())
	var ts [8]byte
	binary.BigEndian.PutUint64(ts[:], ms)
	copy(u[0:6], ts[2:8])
	u[6] = 0x70 | u[6]&0x0f
	u[8] = 0x80 | u[8]&0x3f
	return u
}

// newUUIDv4 mints a random resume token (RFC 9562 §5.4).
func newUUIDv4() wire.UUID {
	var u wire.UUID
	_, _ = rand.Read(u[:])
	u[6] = 0x40 | u[6]&0x0f
	u[8] = 0x80 | u[8]&0x3f
	return u
}
