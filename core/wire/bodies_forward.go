package wire

// This project's extension (docs/protocol.md#extensions): FORWARDED_SESSION and
// FORWARDED_SESSION_OK, spoken between a gateway broker and a partition
// owner.

const (
	magicForwardedSessionV1 = "FFS1"
	magicForwardedSessionV2 = "FFS2"
	magicForwardedSessionOK = "FFO1"
)

// FlagReleaseOnClose is FFS2 flags bit 0: on an orderly close of the
// upstream connection the owner ends the session at once instead of
// holding it for its reconnect grace (docs/protocol.md#forwarded-session).
const FlagReleaseOnClose uint8 = 0x01

// ForwardedHopCount is the only hop count an owner accepts (docs/protocol.md#owner-side).
const ForwardedHopCount uint8 = 1

// ForwardedSession is the FORWARDED_SESSION body (op 200, docs/protocol.md#forwarded-session). V2
// selects the FFS2 layout, which adds Flags; with V2 false the body is FFS1
// and Flags is neither encoded nor decoded (it decodes as 0).
//
// The decoder is strict about layout but not about meaning: a hop count
// other than 1 decodes fine and is rejected by Validate (the owner answers
// ERROR 400), and reserved flag bits are kept as received so that a
// decode/encode round trip is exact (receivers ignore them).
type ForwardedSession struct {
	V2               bool
	OriginNodeID     string // gateway's node id (its reporter_node_id)
	HopCount         uint8  // always 1
	ActingUsername   string // end user at the gateway; "" without auth
	ClientID         string // canonical UUID text of the gateway's client_id
	ConnectionID     uint64 // gateway-local, never reused in its process
	ClientRemoteAddr string // host:port as the gateway saw it
	Flags            uint8  // FFS2 only; see FlagReleaseOnClose
}

// ReleaseOnClose reports whether the FFS2 release_on_close bit is set. It is
// always false for an FFS1 body.
func (f *ForwardedSession) ReleaseOnClose() bool {
	return f.V2 && f.Flags&FlagReleaseOnClose != 0
}

// Validate applies the owner's semantic check that follows a successful
// decode (docs/protocol.md#owner-side): the hop count must be 1. It returns ErrBadHopCount
// otherwise.
func (f *ForwardedSession) Validate() error {
	if f.HopCount != ForwardedHopCount {
		return ErrBadHopCount
	}
	return nil
}

// AppendTo appends the FFS1 or FFS2 body.
func (f *ForwardedSession) AppendTo(b []byte) []byte {
	if f.V2 {
		b = append(b, magicForwardedSessionV2...)
	} else {
		b = append(b, magicForwardedSessionV1...)
	}
	b = appendStr(b, f.OriginNodeID)
	b = appendU8(b, f.HopCount)
	b = appendStr(b, f.ActingUsername)
	b = appendStr(b, f.ClientID)
	b = appendU64(b, f.ConnectionID)
	b = appendStr(b, f.ClientRemoteAddr)
	if f.V2 {
		b = appendU8(b, f.Flags)
	}
	return b
}

// Decode parses an FFS1 or FFS2 body; the magic selects the layout.
func (f *ForwardedSession) Decode(b []byte) error {
	var r reader
	r.begin(b, OpForwardedSession)
	for r.next() {
		f.V2 = r.magicOneOf(magicForwardedSessionV1, magicForwardedSessionV2) == 2
		f.OriginNodeID = r.str("origin_node_id")
		f.HopCount = r.u8("hop_count")
		f.ActingUsername = r.str("acting_username")
		f.ClientID = r.str("client_id")
		f.ConnectionID = r.u64("connection_id")
		f.ClientRemoteAddr = r.str("client_remote_addr")
		f.Flags = 0
		if f.V2 {
			f.Flags = r.u8("flags")
		}
		r.end()
	}
	return r.result()
}

// ForwardedSessionOK is the FORWARDED_SESSION_OK body (op 201, docs/protocol.md#forwarded-session).
type ForwardedSessionOK struct {
	// ForwardingVersion is the highest forwarding version the owner
	// implements: 1 = FFS1 only, 2 = also FFS2 (release_on_close).
	ForwardingVersion uint16
}

// AppendTo appends the FFO1 body.
func (f *ForwardedSessionOK) AppendTo(b []byte) []byte {
	return appendU16(append(b, magicForwardedSessionOK...), f.ForwardingVersion)
}

// Decode parses an FFO1 body.
func (f *ForwardedSessionOK) Decode(b []byte) error {
	var r reader
	r.begin(b, OpForwardedSessionOK)
	for r.next() {
		r.magic(magicForwardedSessionOK)
		f.ForwardingVersion = r.u16("forwarding_version")
		r.end()
	}
	return r.result()
}
