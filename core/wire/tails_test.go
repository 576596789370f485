package wire

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// TestTolerantTails covers : each of the three bodies cut right before
// its tail decodes with the default, re-encodes with the tail written, and a
// tail followed by extra bytes is rejected.
func TestTolerantTails(t *testing.T) {
	vecs := loadVectors(t)
	cases := []struct {
		vector  string
		op      Op
		tailLen int // bytes of the tail in the vector
		check   func(t *testing.T, b Body)
	}{
		{"publish", OpPublish, 9, func(t *testing.T, b Body) {
			if p := b.(*Publish); p.TTLMillis.Present || !bytes.Equal(p.Payload, []byte{1, 2, 3, 4}) {
				t.Errorf("ttl %+v payload %x", p.TTLMillis, p.Payload)
			}
		}},
		{"publish_no_ttl", OpPublish, 1, func(t *testing.T, b Body) {
			if p := b.(*Publish); p.TTLMillis.Present {
				t.Errorf("ttl %+v", p.TTLMillis)
			}
		}},
		{"declare", OpDeclareQueue, 9, func(t *testing.T, b Body) {
			d := b.(*DeclareQueue)
			if d.DefaultMessageTTLMillis.Present || d.PartitionCount != Some[uint32](4) {
				t.Errorf("ttl %+v count %+v", d.DefaultMessageTTLMillis, d.PartitionCount)
			}
		}},
		{"declare_min", OpDeclareQueue, 1, func(t *testing.T, b Body) {
			if d := b.(*DeclareQueue); d.DefaultMessageTTLMillis.Present {
				t.Errorf("ttl %+v", d.DefaultMessageTTLMillis)
			}
		}},
		{"reconcile_result", OpReconcileResult, 4, func(t *testing.T, b Body) {
			r := b.(*ReconcileResult)
			if r.CodesPresent || len(r.Entries) != 2 {
				t.Fatalf("codes present %v, %d entries", r.CodesPresent, len(r.Entries))
			}
			for i, e := range r.Entries {
				if e.Code != ReasonUnspecified {
					t.Errorf("entry %d code %v, want unspecified", i, e.Code)
				}
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.vector, func(t *testing.T) {
			full := vecs[c.vector]
			cut := full[:len(full)-c.tailLen]
			got, err := DecodeBody(c.op, cut)
			if err != nil {
				t.Fatalf("body without tail: %v", err)
			}
			c.check(t, got)

			// The encoder always writes the tail (zeros/absent by default).
			out := got.AppendTo(nil)
			if !bytes.HasPrefix(out, cut) || len(out) != len(cut)+tailDefaultLen(c.op, got) {
				t.Errorf("re-encode %x does not extend %x by the default tail", out, cut)
			}
			again, err := DecodeBody(c.op, out)
			if err != nil {
				t.Fatal(err)
			}
			if rr, ok := again.(*ReconcileResult); ok {
				rr.CodesPresent = false
			}
			if !reflect.DeepEqual(again, got) {
				t.Errorf("decode(encode) = %#v, want %#v", again, got)
			}

			// A complete tail followed by anything is trailing bytes.
			if _, err := DecodeBody(c.op, append(bytes.Clone(full), 0)); !errors.Is(err, ErrTrailingBytes) {
				t.Errorf("tail + 1 byte: %v, want trailing bytes", err)
			}
			// A partial tail must parse exactly: truncated (or a bad tag).
			if c.tailLen > 1 {
				if _, err := DecodeBody(c.op, full[:len(full)-1]); !errors.Is(err, ErrTruncated) {
					t.Errorf("partial tail: %v, want truncated", err)
				}
			}
		})
	}
}

func tailDefaultLen(op Op, b Body) int {
	if op == OpReconcileResult {
		return 2 * len(b.(*ReconcileResult).Entries)
	}
	return 1 // an absent opt<u64>
}

// A RECONCILE_RESULT with zero entries has an empty tail, so any byte after
// the count is trailing.
func TestReconcileResultEmpty(t *testing.T) {
	b := []byte("FRR1\x00\x00\x00\x00")
	var r ReconcileResult
	if err := r.Decode(b); err != nil || len(r.Entries) != 0 || r.CodesPresent {
		t.Fatalf("%v %#v", err, r)
	}
	if err := r.Decode(append(b, 0)); !errors.Is(err, ErrTrailingBytes) {
		t.Fatalf("got %v", err)
	}
	if out := (&ReconcileResult{}).AppendTo(nil); !bytes.Equal(out, b) {
		t.Fatalf("encode %x", out)
	}
}
