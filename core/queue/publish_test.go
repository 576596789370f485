package queue

import (
	"strings"
	"sync"
	"testing"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/storage"
	"github.com/fibrilgo/fibril/core/wire"
)

// S-23, S-35, S-36: offsets are dense from 0; each done is called once,
// after the fsync (FsyncAlways, real disk), in offset order.
func TestPublishConfirmOrder_S35_S36(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Storage.Fsync = storage.FsyncAlways })
	p := e.part("orders", 0)
	const n = 200
	var mu sync.Mutex
	var got []uint64
	var wg sync.WaitGroup
	wg.Add(n)
	for i := range n {
		msg := &Message{Payload: []byte(itoa(i)), Received: e.nowMs()}
		err := p.Publish(msg, func(off uint64, err error) {
			if err != nil {
				t.Errorf("confirm %d: %v", off, err)
			}
			mu.Lock()
			got = append(got, off)
			mu.Unlock()
			wg.Done()
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	for i, off := range got {
		if off != uint64(i) {
			t.Fatalf("confirm %d has offset %d (confirms %v)", i, off, got[:i+1])
		}
	}
	if d := p.Depth(); d.Ready != n {
		t.Fatalf("depth %+v", d)
	}
}

// S-143: a message is deliverable as soon as Publish returns, before its
// confirm.
func TestPublishDeliverableAtOnce_S143(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Storage.Fsync = storage.FsyncAlways })
	p := e.part("orders", 0)
	_, r := e.sub(p, 1, false)
	confirmed := make(chan struct{})
	if err := p.Publish(&Message{Payload: []byte("x")}, func(uint64, error) { close(confirmed) }); err != nil {
		t.Fatal(err)
	}
	wantPayloads(t, r.take(), "x") // delivered inside Publish
	<-confirmed
}

// S-33, docs/protocol.md#publish: fibril.* and stroma.* keys are refused with 400 and
// nothing is stored, except fibril.client.*; the match is case-sensitive.
func TestReservedHeaders_S33(t *testing.T) {
	e := newEnv(t)
	p := e.part("orders", 0)
	for _, key := range []string{"fibril.retries", "fibril.x", "stroma.dlq.reason", "stroma.", "fibril.clientx"} {
		called := false
		err := p.Publish(&Message{Headers: wire.Headers{{Key: key, Value: "v"}}}, func(uint64, error) { called = true })
		wantCode(t, err, core.ErrBadRequest)
		if !strings.Contains(err.Error(), key) {
			t.Errorf("message %q does not name %q", err, key)
		}
		if called {
			t.Errorf("done called after a validation error")
		}
	}
	if _, next := p.log.Bounds(); next != 0 {
		t.Fatalf("a refused publish was stored (next=%d)", next)
	}
	_, r := e.sub(p, 10, true)
	for _, key := range []string{"fibril.client.producer_id", "Fibril.x", "STROMA.x", "x-fibril."} {
		e.pub(p, key, withHeaders(key, "v"))
	}
	for _, d := range r.take() {
		if v, ok := header(d, string(d.Payload)); !ok || v != "v" {
			t.Errorf("header %q not passed through: %+v", d.Payload, d.Headers)
		}
	}
}

// S-34, docs/protocol.md#publish: a content-type header (any case) is removed; the tag
// is derived from it only when the body's tag is 0.
func TestContentTypeNormalisation_S34(t *testing.T) {
	cases := []struct {
		tag     wire.ContentType
		headers wire.Headers
		want    wire.ContentType
	}{
		{wire.ContentType{}, wire.Headers{{Key: "Content-Type", Value: "application/json"}}, wire.ContentType{Tag: wire.ContentJSON}},
		{wire.ContentType{}, wire.Headers{{Key: "content-type", Value: " application/msgpack ; x=y"}}, wire.ContentType{Tag: wire.ContentMsgPack}},
		{wire.ContentType{}, wire.Headers{{Key: "CONTENT-TYPE", Value: "application/json; charset=utf-8"}}, wire.ContentType{Tag: wire.ContentJSON}},
		{wire.ContentType{}, wire.Headers{{Key: "content-type", Value: "text/plain; charset=utf-8"}}, wire.ContentType{Tag: wire.ContentText}},
		{wire.ContentType{}, wire.Headers{{Key: "content-type", Value: "text/plain"}}, wire.ContentType{Tag: wire.ContentCustom, Custom: "text/plain"}},
		{wire.ContentType{}, wire.Headers{{Key: "content-type", Value: "text/plain;charset=utf-8"}}, wire.ContentType{Tag: wire.ContentCustom, Custom: "text/plain;charset=utf-8"}},
		{wire.ContentType{Tag: wire.ContentText}, wire.Headers{{Key: "content-type", Value: "application/json"}}, wire.ContentType{Tag: wire.ContentText}},
		{wire.ContentType{Tag: wire.ContentCustom, Custom: "image/png"}, nil, wire.ContentType{Tag: wire.ContentCustom, Custom: "image/png"}},
		{wire.ContentType{}, wire.Headers{{Key: "content-type", Value: "a"}, {Key: "Content-type", Value: "application/json"}}, wire.ContentType{Tag: wire.ContentJSON}},
	}
	e := newEnv(t)
	p := e.part("orders", 0)
	_, r := e.sub(p, 100, true)
	for i, c := range cases {
		in := append(wire.Headers{{Key: "keep", Value: "1"}}, c.headers...)
		orig := append(wire.Headers(nil), in...)
		if err := p.Publish(&Message{ContentType: c.tag, Headers: in}, nil); err != nil {
			t.Fatal(err)
		}
		ds := r.take()
		if len(ds) != 1 {
			t.Fatalf("case %d: %d deliveries", i, len(ds))
		}
		if ds[0].ContentType != c.want {
			t.Errorf("case %d: content type %+v, want %+v", i, ds[0].ContentType, c.want)
		}
		if len(ds[0].Headers) != 1 || ds[0].Headers[0].Key != "keep" {
			t.Errorf("case %d: headers %+v, want only keep", i, ds[0].Headers)
		}
		for j := range orig {
			if in[j] != orig[j] {
				t.Fatalf("case %d: Publish modified the caller's headers", i)
			}
		}
	}
}

// broker.max_message_bytes → 413; payload is the limit, not the record.
func TestPublishTooLarge(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.MaxMessageBytes = 8 })
	p := e.part("orders", 0)
	e.pub(p, "12345678")
	err := p.Publish(&Message{Payload: []byte("123456789")}, nil)
	wantCode(t, err, core.ErrTooLarge)
}

// Message buffers may be reused by the session after Publish returns.
func TestPublishCopiesCallerBuffers(t *testing.T) {
	e := newEnv(t)
	p := e.part("orders", 0)
	buf := []byte("original")
	hk := []byte("key")
	if err := p.Publish(&Message{Payload: buf, Headers: wire.Headers{{Key: string(hk), Value: "v"}}}, nil); err != nil {
		t.Fatal(err)
	}
	copy(buf, "XXXXXXXX")
	_, r := e.sub(p, 1, false)
	wantPayloads(t, r.take(), "original")
}
