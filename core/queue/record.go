package queue

import (
	"encoding/binary"
	"errors"

	"github.com/fibrilgo/fibril/core/wire"
)

// The engine's record format: what one queue message looks like inside a
// storage record (README.md has the table). It is compact and versioned:
// the timestamps the engine needs to decide deliverability (TTL deadline,
// not_before) come first, so recovery can read them without decoding the
// headers or touching the payload.
//
//	u8      format version (recordVersion)
//	u8      flags: 1 = has deadline, 2 = has not_before, 4 = custom content type
//	u8      content-type tag (wire.ContentType)
//	uvarint published (producer clock, echoed verbatim)
//	varint  received (broker clock, unix ms)
//	varint  deadline (unix ms)            if flag 1
//	uvarint not_before (unix ms)          if flag 2
//	uvarint len + bytes: custom MIME text if flag 4
//	uvarint header count, then per header: uvarint len + key, uvarint len + value
//	payload: every remaining byte
const recordVersion = 1

const (
	flagDeadline  = 1 << 0
	flagNotBefore = 1 << 1
	flagCustomCT  = 1 << 2
)

var errBadRecord = errors.New("queue: malformed engine record")

// record is one decoded queue message.
type record struct {
	ContentType wire.ContentType
	Headers     wire.Headers
	Published   uint64
	Received    int64
	Deadline    int64  // TTL deadline, unix ms; 0 = never expires
	NotBefore   uint64 // unix ms; 0 = deliverable at once
	Payload     []byte
}

// encode returns the record's bytes in a fresh buffer (the buffer may
// later be aliased by a Delivery, so it is never pooled).
func (r *record) encode() []byte {
	n := 3 + 3*binary.MaxVarintLen64 + binary.MaxVarintLen32 + len(r.Payload)
	if r.ContentType.Tag == wire.ContentCustom {
		n += binary.MaxVarintLen32 + len(r.ContentType.Custom)
	}
	for _, h := range r.Headers {
		n += 2*binary.MaxVarintLen32 + len(h.Key) + len(h.Value)
	}
	b := make([]byte, 0, n)
	var flags byte
	if r.Deadline != 0 {
		flags |= flagDeadline
	}
	if r.NotBefore != 0 {
		flags |= flagNotBefore
	}
	if r.ContentType.Tag == wire.ContentCustom {
		flags |= flagCustomCT
	}
	b = append(b, recordVersion, flags, byte(r.ContentType.Tag))
	b = binary.AppendUvarint(b, r.Published)
	b = binary.AppendVarint(b, r.Received)
	if r.Deadline != 0 {
		b = binary.AppendVarint(b, r.Deadline)
	}
	if r.NotBefore != 0 {
		b = binary.AppendUvarint(b, r.NotBefore)
	}
	if flags&flagCustomCT != 0 {
		b = appendString(b, r.ContentType.Custom)
	}
	b = binary.AppendUvarint(b, uint64(len(r.Headers)))
	for _, h := range r.Headers {
		b = appendString(b, h.Key)
		b = appendString(b, h.Value)
	}
	return append(b, r.Payload...)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// recReader walks an encoded record; the first failure sticks.
type recReader struct {
	b   []byte
	bad bool
}

func (r *recReader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *recReader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *recReader) str() string {
	n := r.uvarint()
	if r.bad || n > uint64(len(r.b)) {
		r.bad = true
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// decodeMeta reads the fixed part of a record (everything but headers and
// payload) into r and returns the reader positioned at the header count.
func decodeMeta(data []byte, r *record) (recReader, error) {
	if len(data) < 3 || data[0] != recordVersion || data[2] > byte(wire.ContentCustom) {
		return recReader{}, errBadRecord
	}
	flags := data[1]
	rd := recReader{b: data[3:]}
	r.ContentType = wire.ContentType{Tag: wire.ContentTag(data[2])}
	r.Published = rd.uvarint()
	r.Received = rd.varint()
	r.Deadline, r.NotBefore = 0, 0
	if flags&flagDeadline != 0 {
		r.Deadline = rd.varint()
	}
	if flags&flagNotBefore != 0 {
		r.NotBefore = rd.uvarint()
	}
	if flags&flagCustomCT != 0 {
		r.ContentType.Custom = rd.str()
	}
	if rd.bad {
		return rd, errBadRecord
	}
	return rd, nil
}

// decodeRecord decodes a whole record. Payload aliases data; the header
// strings are copies.
func decodeRecord(data []byte) (record, error) {
	var r record
	rd, err := decodeMeta(data, &r)
	if err != nil {
		return r, err
	}
	n := rd.uvarint()
	if rd.bad || n > uint64(len(rd.b))/2 {
		return r, errBadRecord
	}
	if n > 0 {
		r.Headers = make(wire.Headers, n, n+1) // room for fibril.retries
		for i := range r.Headers {
			r.Headers[i].Key = rd.str()
			r.Headers[i].Value = rd.str()
		}
	}
	if rd.bad {
		return r, errBadRecord
	}
	r.Payload = rd.b
	return r, nil
}
