package wire

import (
	"errors"
	"strconv"
)

// UUID is 16 raw bytes in the order of its canonical text form (`uuid`).
type UUID [16]byte

const hexDigits = "0123456789abcdef"

// String returns the canonical lowercase hyphenated form
// (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx), the form FORWARDED_SESSION's
// client_id carries (docs/protocol.md#forwarded-session).
func (u UUID) String() string {
	var b [36]byte
	j := 0
	for i, c := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b[j] = '-'
			j++
		}
		b[j] = hexDigits[c>>4]
		b[j+1] = hexDigits[c&0x0f]
		j += 2
	}
	return string(b[:])
}

// IsZero reports whether every byte is zero (the nil UUID, which cohorts forbid
// as a cohort member id).
func (u UUID) IsZero() bool { return u == UUID{} }

var errBadUUID = errors.New("wire: invalid UUID text")

// ParseUUID parses the canonical 36-character hyphenated form; hex digits
// may be upper or lower case. Other spellings (braces, URN prefix, missing
// hyphens) are rejected so that text ids compare unambiguously.
func ParseUUID(s string) (UUID, error) {
	var u UUID
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return UUID{}, errBadUUID
	}
	j := 0
	for i := 0; i < 36; {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			i++
			continue
		}
		hi, ok1 := unhex(s[i])
		lo, ok2 := unhex(s[i+1])
		if !ok1 || !ok2 {
			return UUID{}, errBadUUID
		}
		u[j] = hi<<4 | lo
		j++
		i += 2
	}
	return u, nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// Option is the `opt<T>`: absent (tag 0) or present (tag 1) with a
// value. A present empty string is distinct from absent — the SDKs keep the
// two apart, so the codec must too.
type Option[T any] struct {
	Value   T
	Present bool
}

// Some returns a present option holding v.
func Some[T any](v T) Option[T] { return Option[T]{Value: v, Present: true} }

// None returns an absent option; the zero Option is also absent.
func None[T any]() Option[T] { return Option[T]{} }

// Get returns the value and whether it is present.
func (o Option[T]) Get() (T, bool) { return o.Value, o.Present }

// Header is one header entry. Order is kept (Headers is a slice, not a map)
// so that decoding then encoding a body reproduces it byte for byte.
type Header struct{ Key, Value string }

// Headers is the header list in wire order.
type Headers []Header

// Get returns the value of key, using the last entry on duplicates as
// upstream does. Keys are case-sensitive.
func (h Headers) Get(key string) (string, bool) {
	for i := len(h) - 1; i >= 0; i-- {
		if h[i].Key == key {
			return h[i].Value, true
		}
	}
	return "", false
}

// ContentTag is the content-type tag.
type ContentTag uint8

// Content-type tags. A tag above ContentCustom is malformed.
const (
	ContentNone    ContentTag = 0
	ContentMsgPack ContentTag = 1
	ContentJSON    ContentTag = 2
	ContentText    ContentTag = 3
	ContentCustom  ContentTag = 4
)

// Valid reports whether t is in the table.
func (t ContentTag) Valid() bool { return t <= ContentCustom }

func (t ContentTag) String() string {
	switch t {
	case ContentNone:
		return "none"
	case ContentMsgPack:
		return "msgpack"
	case ContentJSON:
		return "json"
	case ContentText:
		return "text"
	case ContentCustom:
		return "custom"
	}
	return "ContentTag(" + strconv.Itoa(int(t)) + ")"
}

// ContentType is the tag plus, for ContentCustom only, the MIME text.
// Custom is ignored when encoding any other tag.
type ContentType struct {
	Tag    ContentTag
	Custom string
}

// MIME returns the equivalent content-type header text ("" for
// ContentNone), as used by the normalisation of docs/protocol.md#publish.
func (c ContentType) MIME() string {
	switch c.Tag {
	case ContentMsgPack:
		return "application/msgpack"
	case ContentJSON:
		return "application/json"
	case ContentText:
		return "text/plain; charset=utf-8"
	case ContentCustom:
		return c.Custom
	}
	return ""
}

// AdvertisedAddress is one endpoint (docs/protocol.md#endpoints). Host may be a DNS name, an IPv4
// literal or a bracketed IPv6 literal.
type AdvertisedAddress struct {
	Host string
	Port uint16
	Tags []string
}

// String returns host:port, the form the SDKs dial (docs/protocol.md#topology).
func (a AdvertisedAddress) String() string {
	return a.Host + ":" + strconv.FormatUint(uint64(a.Port), 10)
}

// ResumeIdentity is the triple a client presents to resume a session.
type ResumeIdentity struct {
	OwnerID     UUID
	ClientID    UUID
	ResumeToken UUID
}
