package core

import (
	"context"
	"errors"
	"time"
)

// Document is one compare-and-set versioned value kept in a shared place:
// the replicated user store and runtime settings document (S-144) live in
// the Coordinator through core/cluster.Doc, so every broker reads and
// changes the same one. Version 0 means "absent".
type Document interface {
	// Load reads the document, linearizably.
	Load(ctx context.Context) (data []byte, version uint64, err error)
	// Swap writes data when the stored version equals version (0: only
	// when absent) and returns the new version; a mismatch is
	// ErrVersionConflict.
	Swap(ctx context.Context, data []byte, version uint64) (uint64, error)
	// Watch returns the document once the coordination index passes after
	// (level-triggered, as Coordinator.Watch), with the index to pass next.
	Watch(ctx context.Context, after uint64) (data []byte, version, index uint64, err error)
}

// Follow calls apply with the document every time the coordination index
// moves (a level-triggered loop over Document.Watch; apply may see the
// same version again and must ignore it). Watch errors back off and
// retry. Follow returns when ctx ends.
func Follow(ctx context.Context, doc Document, apply func(data []byte, version uint64)) {
	var idx uint64
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		data, ver, next, err := doc.Watch(ctx, idx)
		if err != nil {
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		idx = next
		apply(data, ver)
	}
}

// LoadOrSeed reads doc; when it does not exist yet, seed (nil, or returning
// nil data: nothing to seed) supplies its first content, stored with
// compare-and-set — if another writer stored one first, that one is read
// instead. seeded reports whether this call wrote the document. An error
// from seed is returned as it is.
func LoadOrSeed(ctx context.Context, doc Document, seed func() ([]byte, error)) (data []byte, version uint64, seeded bool, err error) {
	if data, version, err = doc.Load(ctx); err != nil || version != 0 || seed == nil {
		return data, version, false, err
	}
	first, err := seed()
	if err != nil || first == nil {
		return data, version, false, err
	}
	version, err = doc.Swap(ctx, first, 0)
	switch {
	case err == nil:
		return first, version, true, nil
	case errors.Is(err, ErrVersionConflict): // another writer seeded first
		data, version, err = doc.Load(ctx)
		return data, version, false, err
	}
	return nil, 0, false, err
}
