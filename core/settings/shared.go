package settings

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/fibrilgo/fibril/core"
)

// OpenShared opens the runtime settings document kept in doc — in
// coordinated mode the Coordinator holds one document for the whole
// cluster (S-173). It is seeded with seed only when none exists (S-167),
// and followed: a change made at any broker applies here without a
// restart. Close stops the following.
func OpenShared(ctx context.Context, doc core.Document, seed Document, log *slog.Logger) (*Store, error) {
	if log == nil {
		log = slog.Default()
	}
	st := &Store{doc: doc, log: log}
	var seedErr error
	data, ver, _, err := core.LoadOrSeed(ctx, doc, func() ([]byte, error) {
		if err := seed.Validate(); err != nil {
			seedErr = fmt.Errorf("runtime settings seed: %w", err)
			return nil, seedErr
		}
		return json.Marshal(seed)
	})
	if seedErr != nil {
		return nil, seedErr
	}
	if err != nil {
		return nil, fmt.Errorf("runtime settings: %w", err)
	}
	d, err := parseDocument(data)
	if err != nil {
		return nil, fmt.Errorf("runtime settings in the coordinator: %w", err)
	}
	st.cur.Store(&d)
	st.docVer = ver
	fctx, cancel := context.WithCancel(context.Background())
	st.stop = cancel
	st.done = make(chan struct{})
	go st.follow(fctx)
	return st, nil
}

func parseDocument(b []byte) (Document, error) {
	d, err := decode(b)
	if err != nil {
		return d, err
	}
	if err := d.Validate(); err != nil {
		return d, fmt.Errorf("version %d: %w", d.Version, err)
	}
	return d, nil
}

// follow adopts every newer document another broker stored. An invalid
// one is logged and ignored: the broker keeps the last good settings.
func (s *Store) follow(ctx context.Context) {
	defer close(s.done)
	core.Follow(ctx, s.doc, func(data []byte, ver uint64) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if ver == 0 || ver == s.docVer {
			return
		}
		if err := s.adoptLocked(data, ver); err != nil {
			s.log.Warn("ignoring an invalid runtime settings document from the coordinator", "err", err)
			return
		}
		s.log.Info("runtime settings changed", "version", s.Current().Version)
	})
}

// adoptLocked makes data, the shared document at version ver, current; an
// invalid document changes nothing. Called with s.mu held.
func (s *Store) adoptLocked(data []byte, ver uint64) error {
	d, err := parseDocument(data)
	if err != nil {
		return err
	}
	s.setCurrent(&d)
	s.docVer = ver
	return nil
}

// replaceShared is Replace for a shared document: compare-and-set on the
// coordinator's version, so two brokers changing settings at once cannot
// both win.
func (s *Store) replaceShared(d Document) (Document, error) {
	cur := s.Current()
	b, _ := json.Marshal(d)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ver, err := s.doc.Swap(ctx, b, s.docVer)
	if errors.Is(err, core.ErrVersionConflict) {
		if data, v, lerr := s.doc.Load(ctx); lerr == nil && s.adoptLocked(data, v) == nil {
			cur = s.Current()
		}
		return cur, core.Errorf(core.ErrConflict, "runtime settings changed elsewhere: version is now %d", cur.Version)
	}
	if err != nil {
		return cur, core.Errorf(core.ErrUnavailable, "runtime settings not stored: %v", err)
	}
	s.setCurrent(&d)
	s.docVer = ver
	return d, nil
}

// Close stops following a shared document (no-op for a file store).
func (s *Store) Close() {
	if s.stop != nil {
		s.stop()
		<-s.done
	}
}
