package auth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/fibrilgo/fibril/core"
)

// sharedDoc keeps a Store in a cluster-wide document (S-144): every broker
// authenticates against the same users, and a user added at one broker
// can log in at any other.
type sharedDoc struct {
	doc  core.Document
	ver  uint64 // the document version of Store.cur; guarded by Store.mu
	log  *slog.Logger
	stop context.CancelFunc
	done chan struct{}
}

// sharedRounds bounds the compare-and-set retries of one change.
const sharedRounds = 8

// OpenShared opens the user store kept in doc (coordinated mode). When the
// document does not exist yet, local — the users this node had in its
// users.json, possibly none — becomes its first content; afterwards the
// local file is not read again, and seeds (S-147) apply only while the
// shared store is empty. Close stops following the document.
func OpenShared(ctx context.Context, doc core.Document, local *Store, log *slog.Logger) (*Store, error) {
	if log == nil {
		log = slog.Default()
	}
	data, ver, seeded, err := core.LoadOrSeed(ctx, doc, func() ([]byte, error) {
		if local == nil || local.Len() == 0 {
			return nil, nil
		}
		return encodeStore(*local.cur.Load()), nil
	})
	if err != nil {
		return nil, fmt.Errorf("user store: %w", err)
	}
	if seeded {
		log.Info("user store: the cluster's store starts with this node's users", "count", local.Len())
	}
	set := userSet{}
	if ver != 0 {
		if set, err = parseStore(data); err != nil {
			return nil, fmt.Errorf("user store in the coordinator: %w", err)
		}
	}
	sd := &sharedDoc{doc: doc, ver: ver, log: log, done: make(chan struct{})}
	s := &Store{path: "coordinator:users", shared: sd}
	s.cur.Store(&set)
	fctx, cancel := context.WithCancel(context.Background())
	sd.stop = cancel
	go sd.follow(fctx, s)
	return s, nil
}

// update applies change to the newest document under compare-and-set,
// re-reading and re-applying when another broker changed it first.
// Called with Store.mu held.
//
// A refusal (no such user, or one that exists already) stands only against
// the newest document: this broker's copy may not have seen a change made
// through another broker a moment ago, so a refusal by the copy is checked
// once more after a reload. An administrator who adds a user through one
// broker and sets its permissions through another, behind a load balancer,
// then gets the same answers as through one broker.
func (d *sharedDoc) update(s *Store, change func(set userSet, now time.Time) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reloaded := false
	for range sharedRounds {
		next, err := s.changed(change)
		if err != nil {
			if reloaded {
				return err
			}
			if rerr := d.reload(ctx, s); rerr != nil {
				return rerr
			}
			reloaded = true
			continue
		}
		ver, err := d.doc.Swap(ctx, encodeStore(next), d.ver)
		if err == nil {
			d.ver = ver
			s.cur.Store(&next)
			return nil
		}
		if !errors.Is(err, core.ErrVersionConflict) {
			return core.Errorf(core.ErrUnavailable, "user store not changed: %v", err)
		}
		if err := d.reload(ctx, s); err != nil {
			return err
		}
		reloaded = true
	}
	return core.Errorf(core.ErrUnavailable, "user store: concurrent changes kept conflicting; retry")
}

// reload adopts the stored document. Called with Store.mu held.
func (d *sharedDoc) reload(ctx context.Context, s *Store) error {
	data, ver, err := d.doc.Load(ctx)
	if err != nil {
		return core.Errorf(core.ErrUnavailable, "user store: %v", err)
	}
	d.adopt(s, data, ver)
	return nil
}

func (d *sharedDoc) adopt(s *Store, data []byte, ver uint64) {
	if ver == d.ver {
		return
	}
	set := userSet{}
	if ver != 0 {
		var err error
		if set, err = parseStore(data); err != nil {
			d.log.Warn("ignoring an unreadable user store document from the coordinator", "err", err)
			return
		}
	}
	s.cur.Store(&set)
	d.ver = ver
}

// follow adopts every change another broker stores.
func (d *sharedDoc) follow(ctx context.Context, s *Store) {
	defer close(d.done)
	core.Follow(ctx, d.doc, func(data []byte, ver uint64) {
		s.mu.Lock()
		d.adopt(s, data, ver)
		s.mu.Unlock()
	})
}

// Close stops following a shared store (no-op for a file store).
func (s *Store) Close() {
	if s.shared != nil {
		s.shared.stop()
		<-s.shared.done
	}
}
