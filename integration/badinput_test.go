package integration

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/wire"
)

// Frame limits of the broker in TestBadInput.
const (
	smallMaxFrame   = 4096
	smallMaxMessage = 1024
)

// TestBadInput sends what a broken or hostile peer might, over raw
// sockets, and checks each answer against the table of docs/protocol.md#answers (frame,
// code, connection fate). After each case a well-behaved client on
// another connection still gets a confirmed publish through.
func TestBadInput(t *testing.T) {
	t.Parallel()
	b := startBroker(t,
		fmt.Sprintf("--broker.max_frame_bytes=%d", smallMaxFrame),
		fmt.Sprintf("--broker.max_message_bytes=%d", smallMaxMessage))
	good := newClient(t, b.Addr)
	healthy := func(t *testing.T) {
		t.Helper()
		publish(t, good, "healthy", client.Message{Payload: []byte("still serving")})
	}

	// docs/protocol.md#answers "Body fails to decode after the handshake; unknown opcode":
	// ERROR 400, open (also docs/protocol.md#malformed, S-12).
	t.Run("malformed body after handshake", func(t *testing.T) {
		r := dialRaw(t, b.Addr)
		r.login()
		r.sendBody(wire.OpTopology, 7, []byte("not a topology body"))
		r.expectError(wire.OpError, 7, wire.CodeBadRequest)
		r.sendBody(wire.OpDeclareQueue, 8, []byte("FDQ1\xff"))
		r.expectError(wire.OpError, 8, wire.CodeBadRequest)
		r.ping(9) // still open and in sync
		healthy(t)
	})
	t.Run("unknown opcode after handshake", func(t *testing.T) {
		r := dialRaw(t, b.Addr)
		r.login()
		r.sendBody(wire.Op(4242), 7, nil)
		r.expectError(wire.OpError, 7, wire.CodeBadRequest)
		r.send(wire.OpHello, 8, &wire.Hello{ClientName: "again", ProtocolVersion: 1}) // a second HELLO (docs/protocol.md#handshake)
		r.expectError(wire.OpError, 8, wire.CodeBadRequest)
		r.ping(9)
		healthy(t)
	})

	// docs/protocol.md#answers last row: a failing fire-and-forget request (unconfirmed
	// publish, ACK, NACK, TOPOLOGY_UPDATE_ACK), malformed ones included,
	// is answered with nothing (an uncorrelated ERROR would make every SDK
	// drop the connection); nothing is stored (S-33).
	t.Run("fire-and-forget failures get no answer", func(t *testing.T) {
		before := metric(t, b, "fibril_broker_published_total")
		r := dialRaw(t, b.Addr)
		r.login()
		r.sendBody(wire.OpAck, 7, []byte("FAK1 garbage"))
		r.sendBody(wire.OpNack, 8, []byte("garbage"))
		r.send(wire.OpNack, 9, &wire.Nack{Topic: "faf", Tags: []uint64{12345}, NotBefore: wire.Some(uint64(1))}) // requeue 0 + not_before (S-59)
		r.sendBody(wire.OpTopologyUpdateAck, 10, []byte("??"))
		r.send(wire.OpPublish, 11, &wire.Publish{Topic: "faf", Headers: wire.Headers{{Key: "fibril.forged", Value: "1"}}, Payload: []byte("x")})
		r.send(wire.OpPublish, 12, &wire.Publish{Topic: "faf", Payload: bytes.Repeat([]byte{'x'}, smallMaxMessage+1)})
		r.send(wire.OpPublish, 13, &wire.Publish{Topic: "faf", Partition: 7, Payload: []byte("no such partition")})
		r.ping(14) // the very next frame is the PONG: none of the above was answered
		r.expectQuiet(100 * time.Millisecond)
		healthy(t)
		if after := metric(t, b, "fibril_broker_published_total"); after != before+1 { // +1: healthy's publish
			t.Fatalf("fibril_broker_published_total went from %v to %v; only the healthy publish may be stored", before, after)
		}
	})

	// S-33: a reserved header on a confirmed publish is refused with 400
	// and the connection stays open; fibril.client.* passes.
	t.Run("reserved header", func(t *testing.T) {
		r := dialRaw(t, b.Addr)
		r.login()
		for i, k := range []string{"fibril.retries", "stroma.dlq.reason"} {
			id := uint64(7 + i)
			r.send(wire.OpPublish, id, &wire.Publish{Topic: "reserved", RequireConfirm: true, Headers: wire.Headers{{Key: k, Value: "1"}}, Payload: []byte("x")})
			r.expectError(wire.OpError, id, wire.CodeBadRequest)
		}
		r.send(wire.OpPublish, 9, &wire.Publish{Topic: "reserved", RequireConfirm: true, Headers: wire.Headers{{Key: "fibril.client.producer_id", Value: "p"}}, Payload: []byte("x")})
		r.expect(wire.OpPublishOK, 9)
		healthy(t)
	})

	// docs/protocol.md#answers "Subscribe failures use ERROR (op 255)": a second subscribe to
	// the same (topic, partition, group) on one connection → ERROR 409,
	// open (S-44).
	t.Run("duplicate subscribe", func(t *testing.T) {
		r := dialRaw(t, b.Addr)
		r.login()
		r.send(wire.OpSubscribe, 7, &wire.Subscribe{Topic: "twice", Prefetch: 1})
		r.expect(wire.OpSubscribeOK, 7)
		r.send(wire.OpSubscribe, 8, &wire.Subscribe{Topic: "twice", Prefetch: 1})
		r.expectError(wire.OpError, 8, wire.CodeConflict)
		r.ping(9)
		healthy(t)
	})

	// docs/protocol.md#answers "Frame header announces more than the maximum frame size":
	// ERROR 400 with that frame's request id, then close (also docs/protocol.md#frames).
	t.Run("oversize frame after handshake", func(t *testing.T) {
		r := dialRaw(t, b.Addr)
		r.login()
		r.writeBytes(wire.AppendFrameHeader(nil, wire.FrameHeader{BodyLen: 1 << 20, Version: 1, Op: wire.OpPublish, RequestID: 77}))
		r.expectError(wire.OpError, 77, wire.CodeBadRequest)
		r.expectClosed()
		healthy(t)
	})
	t.Run("oversize first frame", func(t *testing.T) {
		// Below 64 KiB the header still starts 00 00, so the listener's
		// sniff takes it for a plaintext frame (docs/protocol.md#transport).
		r := dialRaw(t, b.Addr)
		r.writeBytes(wire.AppendFrameHeader(nil, wire.FrameHeader{BodyLen: 2 * smallMaxFrame, Version: 1, Op: wire.OpHello, RequestID: 1}))
		r.expectError(wire.OpError, 1, wire.CodeBadRequest)
		r.expectClosed()
		healthy(t)
	})
	t.Run("first header not starting 00 00", func(t *testing.T) {
		// A body length of 64 KiB or more makes the first two bytes
		// non-zero: neither a plaintext frame nor a TLS ClientHello, so
		// the connection is closed without a frame (docs/protocol.md#transport).
		r := dialRaw(t, b.Addr)
		r.writeBytes(wire.AppendFrameHeader(nil, wire.FrameHeader{BodyLen: 1 << 20, Version: 1, Op: wire.OpHello, RequestID: 1}))
		r.expectClosed()
		healthy(t)
	})

	// docs/protocol.md#answers "Payload larger than the maximum message size (frame itself
	// valid)": ERROR 413, open.
	t.Run("payload above max_message_bytes", func(t *testing.T) {
		r := dialRaw(t, b.Addr)
		r.login()
		big := bytes.Repeat([]byte{'x'}, smallMaxMessage+1)
		frame := wire.AppendFrame(nil, wire.OpPublish, 7, &wire.Publish{Topic: "big", RequireConfirm: true, Payload: big})
		if len(frame) > smallMaxFrame {
			t.Fatalf("test setup: the frame (%d bytes) must stay within max_frame_bytes", len(frame))
		}
		r.writeBytes(frame)
		r.expectError(wire.OpError, 7, wire.CodePayloadTooLarge)
		r.ping(8)
		// Exactly at the limit is fine.
		r.send(wire.OpPublish, 9, &wire.Publish{Topic: "big", RequireConfirm: true, Payload: big[:smallMaxMessage]})
		r.expect(wire.OpPublishOK, 9)
		healthy(t)
	})

	// docs/protocol.md#answers "Any op other than AUTH/PING/PONG before authentication":
	// ERROR 401, then close (also docs/protocol.md#authentication, S-7). PING is answered before it.
	t.Run("unauthenticated op", func(t *testing.T) {
		r := dialRaw(t, b.Addr)
		r.hello()
		r.ping(2)
		r.send(wire.OpPublish, 3, &wire.Publish{Topic: "sneaky", RequireConfirm: true, Payload: []byte("x")})
		r.expectError(wire.OpError, 3, wire.CodeUnauthorized)
		r.expectClosed()
		healthy(t)
	})

	// docs/protocol.md#answers "Wrong credentials": AUTH_ERR 401, then close (S-8).
	t.Run("wrong password", func(t *testing.T) {
		r := dialRaw(t, b.Addr)
		r.hello()
		r.send(wire.OpAuth, 2, &wire.Auth{Username: "fibril", Password: "not-fibril"})
		r.expectError(wire.OpAuthErr, 2, wire.CodeUnauthorized)
		r.expectClosed()
		healthy(t)
	})

	// docs/protocol.md#answers "AUTH repeated on an authenticated connection": AUTH_OK after
	// re-checking, open; other credentials: AUTH_ERR 401 and close (docs/protocol.md#authentication
	// Requirement).
	t.Run("AUTH repeated", func(t *testing.T) {
		r := dialRaw(t, b.Addr)
		r.login()
		r.send(wire.OpAuth, 3, &wire.Auth{Username: "fibril", Password: "fibril"})
		r.expect(wire.OpAuthOK, 3)
		r.ping(4)
		r.send(wire.OpAuth, 5, &wire.Auth{Username: "fibril", Password: "wrong"})
		r.expectError(wire.OpAuthErr, 5, wire.CodeUnauthorized)
		r.expectClosed()
		healthy(t)
	})

	// docs/protocol.md#answers "HELLO asks for a protocol version ≠ 1": HELLO_ERR code 1, then
	// close (also docs/protocol.md#handshake, S-5).
	t.Run("wrong protocol version", func(t *testing.T) {
		r := dialRaw(t, b.Addr)
		r.send(wire.OpHello, 1, &wire.Hello{ClientName: "future", ClientVersion: "9", ProtocolVersion: 2})
		r.expectError(wire.OpHelloErr, 1, wire.CodeUnsupportedVersion)
		r.expectClosed()
		healthy(t)
	})

	// docs/protocol.md#answers "First frame not HELLO, or HELLO malformed": ERROR 400 with the
	// frame's request id, then close (also docs/protocol.md#handshake, S-4).
	t.Run("first frame not HELLO", func(t *testing.T) {
		r := dialRaw(t, b.Addr)
		r.send(wire.OpPing, 5, nil)
		r.expectError(wire.OpError, 5, wire.CodeBadRequest)
		r.expectClosed()
		healthy(t)
	})
	t.Run("malformed HELLO", func(t *testing.T) {
		r := dialRaw(t, b.Addr)
		r.sendBody(wire.OpHello, 6, []byte("FHL1\x00"))
		r.expectError(wire.OpError, 6, wire.CodeBadRequest)
		r.expectClosed()
		healthy(t)
	})

	// docs/protocol.md#transport (plaintext listener, first bytes neither a frame nor a TLS
	// ClientHello): closed without a frame.
	t.Run("garbage byte stream", func(t *testing.T) {
		r := dialRaw(t, b.Addr)
		r.writeBytes([]byte("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"))
		r.expectClosed()
		healthy(t)
	})
}

// TestMaxFrameBytesCountsTheHeader checks the boundary of
// broker.max_frame_bytes, which docs/configuration.md defines as the
// "largest wire frame accepted, header included; a larger one gets ERROR
// 400 and the connection closes" (docs/protocol.md#frames, docs/protocol.md#answers): a frame of exactly
// that size is read, one byte more is refused.
func TestMaxFrameBytesCountsTheHeader(t *testing.T) {
	t.Parallel()
	b := startBroker(t,
		fmt.Sprintf("--broker.max_frame_bytes=%d", smallMaxFrame),
		fmt.Sprintf("--broker.max_message_bytes=%d", smallMaxMessage))

	// A TOPOLOGY request padded to the wanted total size. Its body is
	// malformed (trailing bytes): a frame the broker reads is answered
	// ERROR 400 "malformed frame" and the connection stays open (docs/protocol.md#malformed);
	// an oversize one is answered ERROR 400 and closed.
	frameOf := func(total int, id uint64) []byte {
		body := make([]byte, total-wire.HeaderSize)
		copy(body, "FTP1")
		h := wire.AppendFrameHeader(nil, wire.FrameHeader{BodyLen: uint32(len(body)), Version: 1, Op: wire.OpTopology, RequestID: id})
		return append(h, body...)
	}
	r := dialRaw(t, b.Addr)
	r.login()
	r.writeBytes(frameOf(smallMaxFrame, 7))
	r.expectError(wire.OpError, 7, wire.CodeBadRequest)
	r.ping(8) // a frame of exactly max_frame_bytes is read

	r2 := dialRaw(t, b.Addr)
	r2.login()
	over := frameOf(smallMaxFrame+1, 9)
	if len(over) != smallMaxFrame+1 || binary.BigEndian.Uint32(over) != smallMaxFrame+1-wire.HeaderSize {
		t.Fatal("test setup: wrong frame size")
	}
	r2.writeBytes(over)
	e := r2.expectError(wire.OpError, 9, wire.CodeBadRequest)
	r2.send(wire.OpPing, 10, nil)
	if f, err := r2.read(waitTimeout); err == nil {
		t.Fatalf("a %d-byte frame (header included) was read with broker.max_frame_bytes=%d: answered %q, then %v id %d on the same connection; want ERROR 400 and the close",
			len(over), smallMaxFrame, e.Message, f.h.Op, f.h.RequestID)
	} else if !closedErr(err) {
		t.Fatalf("after the oversize frame: %v, want the close", err)
	}
}

// TestSilentSocketClosed: a socket that never completes a frame header is
// closed without a frame after about 10 s (docs/protocol.md#transport, S-14) — silent from
// the start, or stalled after a partial header — and the broker keeps
// serving meanwhile.
func TestSilentSocketClosed(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	silent := dialRaw(t, b.Addr)
	partial := dialRaw(t, b.Addr)
	partial.writeBytes([]byte{0, 0, 0, 20, 0, 1}) // 6 of the 20 header bytes
	start := time.Now()
	publish(t, newClient(t, b.Addr), "meanwhile", client.Message{Payload: []byte("served")})
	silent.expectClosed()
	partial.expectClosed()
	if waited := time.Since(start); waited < 5*time.Second {
		t.Fatalf("silent sockets closed after %v; the broker must wait for the first frame (about 10 s)", waited)
	}
}
