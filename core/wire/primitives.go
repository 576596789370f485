package wire

import (
	"encoding/binary"
	"math"
	"unicode/utf8"
)

// This file holds the primitives, once: a reader used by every body
// decoder and append-style writers used by every encoder, so that bodies
// are just lists of fields in spec order.

// Decode passes. Every body decoder runs its field list through a reader
// twice:
//
//   - passScan validates the whole body (bounds, tags, enums, UTF-8) and
//     fills every non-string field, but produces "" for strings; it records
//     the byte span [lo, hi) covering all non-empty strings.
//   - passFill runs only if the scan succeeded and saw a non-empty string.
//     The span is converted to one Go string, and every string field becomes
//     a substring of it. The input is already known to be valid, so this
//     pass cannot fail and skips UTF-8 checks.
//
// This keeps the per-decode cost at one allocation for all strings together
// (instead of one per string), which is what the PUBLISH/DELIVER hot path
// needs, without aliasing mutable buffers via unsafe.
const (
	passIdle uint8 = iota
	passScan
	passFill
	passDone
)

// reader is a cursor over one body. Errors are sticky: after the first
// failure every read returns a zero value and consumes nothing, and counts
// read as 0, so field lists need no error checks between fields and loops
// over counts end at once.
type reader struct {
	b    []byte
	off  int
	op   Op
	err  *DecodeError
	pass uint8

	lo, hi  int    // passScan: span of non-empty strings (hi == 0: none yet)
	strs    string // passFill: string(b[strBase:strBase+len(strs)])
	strBase int
}

func (r *reader) begin(b []byte, op Op) { *r = reader{b: b, op: op} }

// next starts the next decode pass and reports whether the caller must run
// its field list (again). Usage:
//
//	var r reader
//	r.begin(b, op)
//	for r.next() {
//		x.read(&r)
//	}
//	return r.result()
func (r *reader) next() bool {
	switch r.pass {
	case passIdle:
		r.pass = passScan
		return true
	case passScan:
		if r.err != nil || r.hi == 0 {
			// Failed, or every string is empty: the scan already set all
			// fields to their final values.
			r.pass = passDone
			return false
		}
		r.strs = string(r.b[r.lo:r.hi])
		r.strBase = r.lo
		r.off = 0
		r.pass = passFill
		return true
	default:
		r.pass = passDone
		return false
	}
}

// result returns the decode error, if any, as a plain error (never a typed
// nil).
func (r *reader) result() error {
	if r.err != nil {
		return r.err
	}
	return nil
}

func (r *reader) fail(field string, at int, err error) {
	if r.err == nil {
		r.err = &DecodeError{Op: r.op, Field: field, Offset: at, Err: err}
	}
}

func (r *reader) remaining() int { return len(r.b) - r.off }

// take consumes n bytes and returns their start offset.
func (r *reader) take(n int, field string) (int, bool) {
	if r.err != nil {
		return 0, false
	}
	if n > r.remaining() {
		r.fail(field, r.off, ErrTruncated)
		return 0, false
	}
	p := r.off
	r.off += n
	return p, true
}

// more reports whether unread bytes remain; used for the tolerant
// tails, which are read only when present.
func (r *reader) more() bool { return r.err == nil && r.off < len(r.b) }

// end rejects bytes after the last field.
func (r *reader) end() {
	if r.err == nil && r.off != len(r.b) {
		r.fail("", r.off, ErrTrailingBytes)
	}
}

// magic checks the 4-byte body magic every body starts with.
func (r *reader) magic(m string) {
	if p, ok := r.take(4, "magic"); ok && string(r.b[p:p+4]) != m {
		r.fail("magic", p, ErrBadMagic)
	}
}

// magicOneOf checks for one of two magics and returns 1 or 2 for the one
// found (0 on failure). Used by FORWARDED_SESSION (FFS1/FFS2, docs/protocol.md#forwarded-session).
func (r *reader) magicOneOf(m1, m2 string) int {
	p, ok := r.take(4, "magic")
	if !ok {
		return 0
	}
	switch string(r.b[p : p+4]) {
	case m1:
		return 1
	case m2:
		return 2
	}
	r.fail("magic", p, ErrBadMagic)
	return 0
}

func (r *reader) u8(field string) uint8 {
	if p, ok := r.take(1, field); ok {
		return r.b[p]
	}
	return 0
}

func (r *reader) u16(field string) uint16 {
	if p, ok := r.take(2, field); ok {
		return binary.BigEndian.Uint16(r.b[p:])
	}
	return 0
}

func (r *reader) u32(field string) uint32 {
	if p, ok := r.take(4, field); ok {
		return binary.BigEndian.Uint32(r.b[p:])
	}
	return 0
}

func (r *reader) u64(field string) uint64 {
	if p, ok := r.take(8, field); ok {
		return binary.BigEndian.Uint64(r.b[p:])
	}
	return 0
}

func (r *reader) uuid(field string) (u UUID) {
	if p, ok := r.take(16, field); ok {
		copy(u[:], r.b[p:p+16])
	}
	return u
}

// boolean reads a strict bool: 0 or 1, anything else is malformed (as
// the upstream broker does).
func (r *reader) boolean(field string) bool {
	at := r.off
	v := r.u8(field)
	if v > 1 {
		r.fail(field, at, ErrBadBool)
		return false
	}
	return v == 1
}

// enum8 reads a closed-table enum with n members (values 0..n-1).
func (r *reader) enum8(field string, n uint8) uint8 {
	at := r.off
	v := r.u8(field)
	if v >= n {
		r.fail(field, at, ErrBadEnum)
		return 0
	}
	return v
}

// present reads a strict option tag (`opt<T>`).
func (r *reader) present(field string) bool {
	at := r.off
	v := r.u8(field)
	if v > 1 {
		r.fail(field, at, ErrBadOptionTag)
		return false
	}
	return v == 1
}

// span reads a u32 length and consumes that many bytes, returning their
// start offset and length. The length is checked against the remaining
// bytes before anything else, so a huge length costs nothing.
func (r *reader) span(field string) (p, n int, ok bool) {
	at := r.off
	l := r.u32(field)
	if r.err != nil {
		return 0, 0, false
	}
	if uint64(l) > uint64(r.remaining()) {
		r.fail(field, at, ErrTruncated)
		return 0, 0, false
	}
	p = r.off
	r.off += int(l)
	return p, int(l), true
}

// str reads a `str`. See the pass comment above for how the result is
// materialised.
func (r *reader) str(field string) string {
	at := r.off
	p, n, ok := r.span(field)
	if !ok || n == 0 {
		return ""
	}
	if r.pass == passFill {
		if q := p - r.strBase; q >= 0 && q+n <= len(r.strs) {
			return r.strs[q : q+n]
		}
		return string(r.b[p : p+n]) // unreachable: the scan covered it
	}
	if !utf8.Valid(r.b[p : p+n]) {
		r.fail(field, at, ErrInvalidUTF8)
		return ""
	}
	if r.hi == 0 {
		r.lo = p
	}
	r.hi = p + n // strings are visited in increasing offset order
	return ""
}

// bytes reads a `bytes`. The result aliases the input (capacity-limited
// so appends cannot clobber later bytes); an empty value is nil.
func (r *reader) bytes(field string) []byte {
	p, n, ok := r.span(field)
	if !ok || n == 0 {
		return nil
	}
	return r.b[p : p+n : p+n]
}

// count reads a u32 element count and rejects it as truncated when even
// minSize bytes per element would not fit in what remains.
// Callers may therefore allocate count elements safely.
func (r *reader) count(field string, minSize int) int {
	at := r.off
	c := r.u32(field)
	if r.err != nil {
		return 0
	}
	if uint64(c)*uint64(minSize) > uint64(r.remaining()) {
		r.fail(field, at, ErrTruncated)
		return 0
	}
	return int(c)
}

func (r *reader) optStr(field string) Option[string] {
	if r.present(field) {
		return Option[string]{Value: r.str(field), Present: true}
	}
	return Option[string]{}
}

func (r *reader) optBytes(field string) Option[[]byte] {
	if r.present(field) {
		return Option[[]byte]{Value: r.bytes(field), Present: true}
	}
	return Option[[]byte]{}
}

func (r *reader) optU32(field string) Option[uint32] {
	if r.present(field) {
		return Option[uint32]{Value: r.u32(field), Present: true}
	}
	return Option[uint32]{}
}

func (r *reader) optU64(field string) Option[uint64] {
	if r.present(field) {
		return Option[uint64]{Value: r.u64(field), Present: true}
	}
	return Option[uint64]{}
}

func (r *reader) optUUID(field string) Option[UUID] {
	if r.present(field) {
		return Option[UUID]{Value: r.uuid(field), Present: true}
	}
	return Option[UUID]{}
}

// contentType reads a content type: a tag, then a str only for the custom tag.
func (r *reader) contentType(field string) ContentType {
	tag := ContentTag(r.enum8(field, uint8(ContentCustom)+1))
	if tag == ContentCustom {
		return ContentType{Tag: tag, Custom: r.str(field)}
	}
	return ContentType{Tag: tag}
}

// headers reads a header list into h, reusing its capacity.
func (r *reader) headers(field string, h Headers) Headers {
	h = resize(h, r.count(field, 8))
	for i := range h {
		h[i].Key = r.str(field)
		h[i].Value = r.str(field)
	}
	return h
}

func (r *reader) u32List(field string, s []uint32) []uint32 {
	s = resize(s, r.count(field, 4))
	for i := range s {
		s[i] = r.u32(field)
	}
	return s
}

func (r *reader) u64List(field string, s []uint64) []uint64 {
	s = resize(s, r.count(field, 8))
	for i := range s {
		s[i] = r.u64(field)
	}
	return s
}

func (r *reader) strList(field string, s []string) []string {
	s = resize(s, r.count(field, 4))
	for i := range s {
		s[i] = r.str(field)
	}
	return s
}

// resize returns s with length n, reusing its backing array when it is big
// enough. Callers overwrite every element. n == 0 on a nil slice stays nil,
// so a fresh decode of an empty list yields nil.
func resize[T any](s []T, n int) []T {
	if n <= cap(s) {
		return s[:n]
	}
	return make([]T, n)
}

// --- writers -------------------------------------------------------------

// appendLen writes a u32 length prefix. A field longer than 2^32-1 bytes
// cannot be represented in v1; encoding one is a programming error (the
// broker's size caps keep real values far below), so it panics rather than
// emit a corrupt frame.
func appendLen(b []byte, n int) []byte {
	if uint64(n) > math.MaxUint32 {
		panic("wire: field longer than 2^32-1 bytes")
	}
	return binary.BigEndian.AppendUint32(b, uint32(n))
}

func appendU8(b []byte, v uint8) []byte   { return append(b, v) }
func appendU16(b []byte, v uint16) []byte { return binary.BigEndian.AppendUint16(b, v) }
func appendU32(b []byte, v uint32) []byte { return binary.BigEndian.AppendUint32(b, v) }
func appendU64(b []byte, v uint64) []byte { return binary.BigEndian.AppendUint64(b, v) }
func appendUUID(b []byte, u UUID) []byte  { return append(b, u[:]...) }

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

func appendStr(b []byte, s string) []byte {
	return append(appendLen(b, len(s)), s...)
}

func appendBytes(b []byte, p []byte) []byte {
	return append(appendLen(b, len(p)), p...)
}

func appendOptStr(b []byte, o Option[string]) []byte {
	if !o.Present {
		return append(b, 0)
	}
	return appendStr(append(b, 1), o.Value)
}

func appendOptBytes(b []byte, o Option[[]byte]) []byte {
	if !o.Present {
		return append(b, 0)
	}
	return appendBytes(append(b, 1), o.Value)
}

func appendOptU32(b []byte, o Option[uint32]) []byte {
	if !o.Present {
		return append(b, 0)
	}
	return appendU32(append(b, 1), o.Value)
}

func appendOptU64(b []byte, o Option[uint64]) []byte {
	if !o.Present {
		return append(b, 0)
	}
	return appendU64(append(b, 1), o.Value)
}

func appendOptUUID(b []byte, o Option[UUID]) []byte {
	if !o.Present {
		return append(b, 0)
	}
	return appendUUID(append(b, 1), o.Value)
}

func appendContentType(b []byte, c ContentType) []byte {
	b = append(b, byte(c.Tag))
	if c.Tag == ContentCustom {
		b = appendStr(b, c.Custom)
	}
	return b
}

func appendHeaders(b []byte, h Headers) []byte {
	b = appendLen(b, len(h))
	for _, e := range h {
		b = appendStr(b, e.Key)
		b = appendStr(b, e.Value)
	}
	return b
}

func appendU32List(b []byte, s []uint32) []byte {
	b = appendLen(b, len(s))
	for _, v := range s {
		b = appendU32(b, v)
	}
	return b
}

func appendU64List(b []byte, s []uint64) []byte {
	b = appendLen(b, len(s))
	for _, v := range s {
		b = appendU64(b, v)
	}
	return b
}

func appendStrList(b []byte, s []string) []byte {
	b = appendLen(b, len(s))
	for _, v := range s {
		b = appendStr(b, v)
	}
	return b
}
