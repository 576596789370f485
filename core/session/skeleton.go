package session

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fibrilgo/fibril/core/wire"
)

// Durable session skeletons (S-106, S-107): after a session subscribes or
// reconciles, its identity and queue subscription set are written to
// <dir>/<client_id>.json, best effort (a failure is logged, never returned
// to the client). A broker restarted in place can then answer a resume
// with `resumed_after_restart`: same ids, an empty unauthenticated
// session, and the client's reconcile rebuilds its subscriptions. The file
// is deleted when the session truly ends.
//
// Skeletons are not fsynced: they protect against a process restart, and
// losing one costs the client a `resume_not_found` and a fresh session,
// never a message.
type skeletonStore struct {
	dir   string
	owner wire.UUID
	now   func() time.Time
}

type skeletonFile struct {
	OwnerID       string        `json:"owner_id"`
	ClientID      string        `json:"client_id"`
	ResumeToken   string        `json:"resume_token"`
	Updated       time.Time     `json:"updated"`
	Subscriptions []skeletonSub `json:"subscriptions"`
}

type skeletonSub struct {
	Topic     string  `json:"topic"`
	Group     *string `json:"group,omitempty"`
	Partition uint32  `json:"partition"`
	Prefetch  uint32  `json:"prefetch"`
	AutoAck   bool    `json:"auto_ack"`
}

// openSkeletons prepares dir and removes skeletons that can no longer be
// claimed: another owner's, unreadable ones, and those older than maxAge.
func openSkeletons(dir string, owner wire.UUID, now func() time.Time, maxAge time.Duration) (*skeletonStore, error) {
	if dir == "" {
		return nil, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	st := &skeletonStore{dir: dir, owner: owner, now: now}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".json") {
			_ = os.Remove(filepath.Join(dir, name)) // leftover temp file
			continue
		}
		sk, err := st.read(filepath.Join(dir, name))
		if err != nil || sk.OwnerID != owner.String() || now().Sub(sk.Updated) > maxAge {
			_ = os.Remove(filepath.Join(dir, name))
		}
	}
	return st, nil
}

func (st *skeletonStore) path(id wire.UUID) string { return filepath.Join(st.dir, id.String()+".json") }

func (st *skeletonStore) read(path string) (skeletonFile, error) {
	var sk skeletonFile
	b, err := os.ReadFile(path)
	if err != nil {
		return sk, err
	}
	err = json.Unmarshal(b, &sk)
	return sk, err
}

// save writes the session's skeleton. Best effort.
func (st *skeletonStore) save(id, token wire.UUID, subs []skeletonSub) error {
	if st == nil {
		return nil
	}
	b, err := json.Marshal(skeletonFile{
		OwnerID:       st.owner.String(),
		ClientID:      id.String(),
		ResumeToken:   token.String(),
		Updated:       st.now(),
		Subscriptions: subs,
	})
	if err != nil {
		return err
	}
	tmp := st.path(id) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, st.path(id))
}

func (st *skeletonStore) delete(id wire.UUID) {
	if st == nil {
		return
	}
	if err := os.Remove(st.path(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return
	}
}

// claim reports whether a skeleton for (id, token) younger than ttl
// exists, and consumes it: the resumed session writes a new one when it
// subscribes or reconciles again.
func (st *skeletonStore) claim(id, token wire.UUID, ttl time.Duration) bool {
	if st == nil || ttl <= 0 {
		return false
	}
	sk, err := st.read(st.path(id))
	if err != nil {
		return false
	}
	if sk.OwnerID != st.owner.String() || sk.ClientID != id.String() ||
		sk.ResumeToken != token.String() || st.now().Sub(sk.Updated) > ttl {
		return false
	}
	st.delete(id)
	return true
}
