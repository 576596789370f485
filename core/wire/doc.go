// Package wire is the Fibril v1 wire codec: frame headers, every
// client-facing message body, the node-only replication bodies, and this
// project's forwarding extension.
//
// This package is the byte layout: each body's AppendTo and Decode are its
// definition, and docs/protocol.md says what the broker does with them.
// Byte compatibility with the existing Fibril client SDKs is the whole
// point of this package, so the layouts are pinned by the 36 vectors the
// SDKs share (vectors_test.go reads ../shared/protocol/wire_vectors.json).
//
// # Layers
//
//   - Frames (docs/protocol.md#frames): a fixed 20-byte header ([FrameHeader]) followed by an
//     op-specific body. [ReadFrame] reads one frame and enforces the
//     broker's body-size cap before allocating; [AppendFrame] writes one.
//     Version and flags are written as 1 and 0 and never checked on
//     receipt (docs/protocol.md#frames).
//   - Primitives and composites: big-endian integers, u32-prefixed
//     strings and byte strings, 16-byte UUIDs, u8-tagged options, u32-counted
//     lists. They live in primitives.go so every body decodes and encodes the
//     same way.
//   - Bodies (docs/protocol.md#extensions): one struct per op, each an [Encoder] (AppendTo writes
//     magic plus fields) and a [Body] (Decode parses magic plus fields).
//     The node-only replication bodies (docs/protocol.md#replication-ops)
//     frame the storage engine's records as opaque bytes.
//
// # Decoding discipline
//
// Decoders are strict: the op selects the body, the 4-byte magic is
// checked first, fields are read in order, bools and option tags must be 0
// or 1, enum8 values must be inside their table, strings must be valid
// UTF-8, and bytes left over are an error — except for the three tolerant
// tails (PUBLISH ttl_ms, DECLARE_QUEUE default_message_ttl_ms,
// RECONCILE_RESULT codes), which may be missing entirely. Failures are
// reported as *[DecodeError], which unwraps to one of the sentinel errors
// (ErrTruncated, ErrBadMagic, ...), so callers can use errors.Is.
//
// Decoders never panic and never trust a count or length from the wire
// further than the bytes actually present: a list whose count times its
// minimum element size exceeds the remaining bytes is rejected as truncated
// before anything is allocated.
//
// # Ownership and allocation
//
// Decoded `bytes` fields (Publish.Payload, Publish.PartitionKey,
// PublishDelayed.Payload, PublishDelayed.PartitionKey, Deliver.Payload, and
// in the replication bodies MessageRecord.Headers, MessageRecord.Payload,
// EventRecord.Payload and StateCheckpoint.StateSnapshot) alias the input
// slice: the decoded body borrows the buffer, and the caller must
// not overwrite or reuse that buffer while the body (or any payload taken
// from it) is still in use. Copy the payload first if it has to outlive the
// buffer. Aliased slices are capacity-limited, so appending to them never
// writes into the rest of the buffer.
//
// String fields never alias the buffer (Go strings are immutable). Each
// decode copies the byte span holding all of the body's strings with a single
// conversion and hands out substrings of it, so decoding a PUBLISH or DELIVER
// into a reused value costs one allocation regardless of the number of
// headers. Decoding into a reused value also reuses the capacity of its
// slices (Headers, lists, ...). If Decode fails, the receiver's contents are
// unspecified.
//
// Encoders append to the caller's slice and never allocate when it has
// enough capacity. They do not validate semantic rules (hop count, enum
// ranges, header reservations); that is the session layer's job.
package wire
