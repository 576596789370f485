package queue

import (
	"slices"

	"github.com/fibrilgo/fibril/core/storage"
	"github.com/fibrilgo/fibril/core/wire"
)

// Message inspection for the admin API (S-69, docs/admin.md#messages):
// read a queue partition's messages with their state, without delivering
// them and without leasing anything.

// Message states as inspection names them.
const (
	StateReady      = "ready"
	StateInflight   = "inflight"
	StateDelayed    = "delayed"
	StatePendingDLQ = "pending_dlq" // on its way to a dead-letter queue
	StateSettled    = "settled"
	StateHeld       = "held" // ready, but at or past the partition's hold (SetHold)
)

// BrowseOptions select what Browse returns.
type BrowseOptions struct {
	From           uint64 // first offset to look at
	Limit          int    // most messages returned (> 0)
	IncludeSettled bool   // also settled messages still in the log
	PayloadLimit   int    // bytes of each payload returned; 0 = none
	// PayloadBudget, when > 0, ends the page once the payloads returned
	// add up to it (one message always fits), keeping answers bounded.
	PayloadBudget int
	// States, when not empty, keeps only messages in one of these states.
	States []string
}

// BrowsedMessage is one message as inspection shows it.
type BrowsedMessage struct {
	Offset      uint64           `json:"offset"`
	State       string           `json:"state"`
	Retries     uint32           `json:"retries"`
	ContentType string           `json:"content_type,omitempty"`
	Type        wire.ContentType `json:"-"`
	Headers     wire.Headers     `json:"-"`
	Published   uint64           `json:"published_ms"`
	Received    int64            `json:"received_ms"`
	NotBefore   int64            `json:"not_before_ms,omitempty"` // delayed: when it becomes ready
	Deadline    int64            `json:"deadline_ms,omitempty"`   // TTL deadline
	PayloadSize int              `json:"payload_size"`
	Payload     []byte           `json:"payload,omitempty"` // the first PayloadLimit bytes
}

// Browse reads up to opts.Limit messages from opts.From on, in offset
// order. next is where a following call continues (the log's end when
// everything was read).
func (p *Partition) Browse(opts BrowseOptions) (msgs []BrowsedMessage, next uint64, err error) {
	p.mu.Lock()
	err = p.usableLocked()
	p.mu.Unlock()
	if err != nil {
		return nil, 0, err
	}
	first, end := p.log.Bounds()
	next = max(opts.From, first)
	if opts.Limit <= 0 {
		return nil, next, nil
	}
	var derr error
	budget := 0
	err = p.log.Scan(next, func(r storage.Record) bool {
		if r.Offset >= end {
			return false
		}
		next = r.Offset + 1
		st, retries, notBefore := p.stateOf(r.Offset)
		if (st == StateSettled && !opts.IncludeSettled) || (len(opts.States) > 0 && !slices.Contains(opts.States, st)) {
			return true
		}
		rec, err := decodeRecord(r.Data)
		if err != nil {
			derr = err
			return false
		}
		m := BrowsedMessage{Offset: r.Offset, State: st, Retries: retries, ContentType: rec.ContentType.MIME(), Type: rec.ContentType,
			Headers: rec.Headers, Published: rec.Published, Received: rec.Received, NotBefore: notBefore,
			Deadline: rec.Deadline, PayloadSize: len(rec.Payload)}
		if opts.PayloadLimit > 0 {
			m.Payload = append([]byte(nil), rec.Payload[:min(len(rec.Payload), opts.PayloadLimit)]...)
		}
		msgs = append(msgs, m)
		budget += len(m.Payload)
		return len(msgs) < opts.Limit && (opts.PayloadBudget <= 0 || budget < opts.PayloadBudget)
	})
	if err == nil {
		err = derr
	}
	return msgs, next, err
}

// stateOf says what the engine is doing with one message.
func (p *Partition) stateOf(off uint64) (state string, retries uint32, notBefore int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	retries = p.retries[off]
	switch {
	case p.log.IsSettled(off):
		return StateSettled, retries, 0
	case p.inflight[off] != nil:
		return StateInflight, retries, 0
	case p.pending[off] != nil:
		return StatePendingDLQ, retries, 0
	}
	if _, ok := p.settling[off]; ok {
		return StateSettled, retries, 0
	}
	if at, ok := p.delayed[off]; ok {
		return StateDelayed, retries, at
	}
	if off >= p.heldFromLocked() {
		return StateHeld, retries, 0
	}
	return StateReady, retries, 0
}
