package wire

// Connection-lifecycle bodies: HELLO, HELLO_OK, AUTH, the shared FER1 error
// body, and GOING_AWAY (docs/protocol.md#handshake, docs/protocol.md#answers).

const (
	magicHello     = "FHL1"
	magicHelloOK   = "FHO1"
	magicAuth      = "FAU1"
	magicError     = "FER1"
	magicGoingAway = "FGA1"
)

// Hello is the HELLO body (op 1).
type Hello struct {
	ClientName      string
	ClientVersion   string
	ProtocolVersion uint16 // must be 1; checked by the broker, not here (docs/protocol.md#handshake)
	Resume          Option[ResumeIdentity]
}

// AppendTo appends the FHL1 body.
func (h *Hello) AppendTo(b []byte) []byte {
	b = append(b, magicHello...)
	b = appendStr(b, h.ClientName)
	b = appendStr(b, h.ClientVersion)
	b = appendU16(b, h.ProtocolVersion)
	if !h.Resume.Present {
		return append(b, 0)
	}
	b = append(b, 1)
	b = appendUUID(b, h.Resume.Value.OwnerID)
	b = appendUUID(b, h.Resume.Value.ClientID)
	return appendUUID(b, h.Resume.Value.ResumeToken)
}

// Decode parses an FHL1 body.
func (h *Hello) Decode(b []byte) error {
	var r reader
	r.begin(b, OpHello)
	for r.next() {
		h.read(&r)
	}
	return r.result()
}

func (h *Hello) read(r *reader) {
	r.magic(magicHello)
	h.ClientName = r.str("client_name")
	h.ClientVersion = r.str("client_version")
	h.ProtocolVersion = r.u16("protocol_version")
	h.Resume = Option[ResumeIdentity]{}
	if r.present("resume") {
		h.Resume.Present = true
		h.Resume.Value.OwnerID = r.uuid("resume.owner_id")
		h.Resume.Value.ClientID = r.uuid("resume.client_id")
		h.Resume.Value.ResumeToken = r.uuid("resume.resume_token")
	}
	r.end()
}

// HelloOK is the HELLO_OK body (op 2). OwnerID, ClientID and
// ResumeToken form the identity the client presents on its next HELLO.
type HelloOK struct {
	ProtocolVersion uint16 // always 1
	OwnerID         UUID
	ClientID        UUID
	ResumeToken     UUID
	ResumeOutcome   ResumeOutcome
	ServerName      string
	Compliance      string // must be the Compliance constant when sent
}

// Identity returns the resume triple carried by the reply.
func (h *HelloOK) Identity() ResumeIdentity {
	return ResumeIdentity{OwnerID: h.OwnerID, ClientID: h.ClientID, ResumeToken: h.ResumeToken}
}

// AppendTo appends the FHO1 body.
func (h *HelloOK) AppendTo(b []byte) []byte {
	b = append(b, magicHelloOK...)
	b = appendU16(b, h.ProtocolVersion)
	b = appendUUID(b, h.OwnerID)
	b = appendUUID(b, h.ClientID)
	b = appendUUID(b, h.ResumeToken)
	b = appendU8(b, uint8(h.ResumeOutcome))
	b = appendStr(b, h.ServerName)
	return appendStr(b, h.Compliance)
}

// Decode parses an FHO1 body.
func (h *HelloOK) Decode(b []byte) error {
	var r reader
	r.begin(b, OpHelloOK)
	for r.next() {
		h.read(&r)
	}
	return r.result()
}

func (h *HelloOK) read(r *reader) {
	r.magic(magicHelloOK)
	h.ProtocolVersion = r.u16("protocol_version")
	h.OwnerID = r.uuid("owner_id")
	h.ClientID = r.uuid("client_id")
	h.ResumeToken = r.uuid("resume_token")
	h.ResumeOutcome = ResumeOutcome(r.enum8("resume_outcome", uint8(len(resumeOutcomeNames))))
	h.ServerName = r.str("server_name")
	h.Compliance = r.str("compliance")
	r.end()
}

// Auth is the AUTH body (op 10). The password travels in clear inside
// the frame; confidentiality comes from TLS.
type Auth struct {
	Username string
	Password string
}

// AppendTo appends the FAU1 body.
func (a *Auth) AppendTo(b []byte) []byte {
	b = append(b, magicAuth...)
	b = appendStr(b, a.Username)
	return appendStr(b, a.Password)
}

// Decode parses an FAU1 body.
func (a *Auth) Decode(b []byte) error {
	var r reader
	r.begin(b, OpAuth)
	for r.next() {
		a.read(&r)
	}
	return r.result()
}

func (a *Auth) read(r *reader) {
	r.magic(magicAuth)
	a.Username = r.str("username")
	a.Password = r.str("password")
	r.end()
}

// ErrorBody is the FER1 body shared by HELLO_ERR (3), AUTH_ERR (12),
// SUBSCRIBE_ERR (32) and ERROR (255) (docs/protocol.md#answers). Decode errors name ERROR;
// DecodeBody substitutes the actual op.
type ErrorBody struct {
	Code    uint16 // error code (docs/protocol.md#answers), e.g. CodeBadRequest
	Message string // shown verbatim by SDKs, never parsed
}

// AppendTo appends the FER1 body.
func (e *ErrorBody) AppendTo(b []byte) []byte {
	b = append(b, magicError...)
	b = appendU16(b, e.Code)
	return appendStr(b, e.Message)
}

// Decode parses an FER1 body.
func (e *ErrorBody) Decode(b []byte) error {
	var r reader
	r.begin(b, OpError)
	for r.next() {
		e.read(&r)
	}
	return r.result()
}

func (e *ErrorBody) read(r *reader) {
	r.magic(magicError)
	e.Code = r.u16("code")
	e.Message = r.str("message")
	r.end()
}

// GoingAway is the GOING_AWAY drain notice (op 103, docs/protocol.md#going-away), always
// sent with request id 0.
type GoingAway struct {
	GraceMillis uint64 // how long the broker keeps serving and holding sessions
	Message     string
}

// AppendTo appends the FGA1 body.
func (g *GoingAway) AppendTo(b []byte) []byte {
	b = append(b, magicGoingAway...)
	b = appendU64(b, g.GraceMillis)
	return appendStr(b, g.Message)
}

// Decode parses an FGA1 body.
func (g *GoingAway) Decode(b []byte) error {
	var r reader
	r.begin(b, OpGoingAway)
	for r.next() {
		g.read(&r)
	}
	return r.result()
}

func (g *GoingAway) read(r *reader) {
	r.magic(magicGoingAway)
	g.GraceMillis = r.u64("grace_ms")
	g.Message = r.str("message")
	r.end()
}
