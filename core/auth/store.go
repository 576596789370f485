package auth

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/config"
)

// StoreFile is the conventional file name of the user store inside
// server.data_dir.
const StoreFile = "users.json"

// Store holds broker users and their argon2id hashes, persisted as one JSON
// file. It is owned by one broker process; tools change users through the
// broker's admin API, not by editing the file under a running broker.
//
// Readers never lock: the user set is an immutable snapshot behind an
// atomic pointer, so a login that is busy in argon2 never holds anything
// an admin change waits for, and the reverse. Writers serialise on mu,
// hash outside it, persist the next snapshot and only then publish it, so
// memory never runs ahead of disk.
type Store struct {
	path string
	mu   sync.Mutex
	cur  atomic.Pointer[userSet]

	// Shared mode (OpenShared): the store is a document in the cluster.
	shared *sharedDoc
}

// UserInfo is what List reports about a user: never the hash.
type UserInfo struct {
	Name            string    `json:"name"`
	Created         time.Time `json:"created"`
	PasswordChanged time.Time `json:"password_changed"`
	// Permissions limits what the user may do with topics; nil: nothing
	// is limited (permissions.go).
	Permissions Permissions `json:"permissions"`
}

// Seed is one user to create while the store is empty: a config file entry
// with an argon2id PHC hash, or the FIBRIL_AUTH_USERNAME/PASSWORD pair with
// a plain password (config.Auth.Seeds builds the list).
type Seed = config.Seed

// userSet is one immutable generation of the store's contents.
type userSet map[string]user

type user struct {
	UserInfo
	hash phc
}

// fileFormat is the on-disk layout. Format lets a later version change the
// layout and refuse to misread an older broker's file or the reverse.
type fileFormat struct {
	Format int          `json:"format"`
	Users  []fileRecord `json:"users"`
}

type fileRecord struct {
	Name            string    `json:"name"`
	PasswordHash    string    `json:"password_hash"`
	Created         time.Time `json:"created"`
	PasswordChanged time.Time `json:"password_changed"`
	// Permissions is absent for an unrestricted user (an empty list
	// allows nothing); only format 2 has it.
	Permissions *Permissions `json:"permissions,omitempty"`
}

// The store's formats: 2 adds per-user permissions. A store is written
// in format 1 while no user has a permission list, so brokers that read
// only format 1 keep working until permissions are used — and then refuse
// the store rather than ignore the lists (which would lift every limit).
const (
	formatBase        = 1
	formatPermissions = 2
	currentFormat     = formatPermissions
)

// OpenStore loads the store at path (conventionally
// <data_dir>/users.json). A missing file is an empty store; the file is
// created by the first change. A file that does not parse or holds an
// invalid entry is an error naming the path: starting with an empty store
// instead would silently re-enable seeding and the default login.
func OpenStore(path string) (*Store, error) {
	if path == "" {
		return nil, errors.New("user store: no path (server.data_dir is empty?)")
	}
	removeLeftovers(path)
	s := &Store{path: path}
	set, err := readStore(path)
	if err != nil {
		return nil, fmt.Errorf("user store %s: %w", path, err)
	}
	s.cur.Store(&set)
	return s, nil
}

func readStore(path string) (userSet, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return userSet{}, nil
	}
	if err != nil {
		return nil, err
	}
	return parseStore(data)
}

// parseStore decodes the store's document (the file, or the shared
// document in coordinated mode: the same format).
func parseStore(data []byte) (userSet, error) {
	var f fileFormat
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("not a user store file: %w", err)
	}
	if f.Format != formatBase && f.Format != formatPermissions {
		return nil, fmt.Errorf("format %d is not supported (this broker reads formats %d and %d)", f.Format, formatBase, formatPermissions)
	}
	set := make(userSet, len(f.Users))
	for i, r := range f.Users {
		if err := ValidateUsername(r.Name); err != nil {
			return nil, fmt.Errorf("entry %d: %w", i, err)
		}
		if _, dup := set[r.Name]; dup {
			return nil, fmt.Errorf("user %q appears twice", r.Name)
		}
		h, err := parsePHC(r.PasswordHash)
		if err != nil {
			return nil, fmt.Errorf("user %q: %w", r.Name, err)
		}
		var ps Permissions
		if r.Permissions != nil {
			if f.Format < formatPermissions {
				return nil, fmt.Errorf("user %q: permissions in a format %d store", r.Name, f.Format)
			}
			if err := r.Permissions.Validate(); err != nil {
				return nil, fmt.Errorf("user %q: %w", r.Name, err)
			}
			ps = append(Permissions{}, *r.Permissions...)
		}
		set[r.Name] = user{UserInfo: UserInfo{Name: r.Name, Created: r.Created, PasswordChanged: r.PasswordChanged, Permissions: ps}, hash: h}
	}
	return set, nil
}

// Path returns the file the store persists to.
func (s *Store) Path() string { return s.path }

// Has reports whether a user named name exists.
func (s *Store) Has(name string) bool {
	_, ok := (*s.cur.Load())[name]
	return ok
}

// Len returns the number of users.
func (s *Store) Len() int { return len(*s.cur.Load()) }

// List returns every user sorted by name.
func (s *Store) List() []UserInfo {
	set := *s.cur.Load()
	out := make([]UserInfo, 0, len(set))
	for _, u := range set {
		out = append(out, u.UserInfo)
	}
	slices.SortFunc(out, func(a, b UserInfo) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// lookup returns the hash of a user. The snapshot is immutable, so the
// caller may run argon2 on the result without holding anything.
func (s *Store) lookup(name string) (phc, bool) {
	u, ok := (*s.cur.Load())[name]
	return u.hash, ok
}

// Add creates a user with a plain password. The name must pass
// ValidateUsername (ErrBadRequest); an existing name is ErrConflict.
func (s *Store) Add(name, password string) error {
	if err := ValidateUsername(name); err != nil {
		return err
	}
	if err := validatePassword(name, password); err != nil {
		return err
	}
	if s.shared == nil && s.Has(name) { // cheap early answer; re-checked under the lock (shared: against the newest document)
		return conflict(name)
	}
	h, err := newHash(password)
	if err != nil {
		return err
	}
	return s.update(func(set userSet, now time.Time) error {
		if _, ok := set[name]; ok {
			return conflict(name)
		}
		set[name] = user{UserInfo: UserInfo{Name: name, Created: now, PasswordChanged: now}, hash: h}
		return nil
	})
}

// SetPassword replaces a user's password (ErrNotFound if there is no such
// user). The new hash uses the current default parameters, so this is also
// how a hash imported with other parameters is upgraded.
func (s *Store) SetPassword(name, password string) error {
	if err := validatePassword(name, password); err != nil {
		return err
	}
	if s.shared == nil && !s.Has(name) { // cheap early answer, as in Add
		return notFound(name)
	}
	h, err := newHash(password)
	if err != nil {
		return err
	}
	return s.update(func(set userSet, now time.Time) error {
		u, ok := set[name]
		if !ok {
			return notFound(name)
		}
		u.hash, u.PasswordChanged = h, now
		set[name] = u
		return nil
	})
}

// Remove deletes a user (ErrNotFound if there is no such user). Removing a
// stored user named fibril re-enables the built-in loopback login if
// auth.allow_default_loopback is on.
func (s *Store) Remove(name string) error {
	return s.update(func(set userSet, _ time.Time) error {
		if _, ok := set[name]; !ok {
			return notFound(name)
		}
		delete(set, name)
		return nil
	})
}

// Seed creates the given users if, and only if, the store is empty (S-147):
// afterwards the store owns its users, so a seed list left in the config
// never resurrects a removed user or resets a changed password. It returns
// how many users it created (0 when the store already had users). Seeds
// are checked as a whole before anything is written: one bad entry
// (reserved or invalid name, duplicate, both or neither of hash and
// password, invalid PHC) creates nobody.
func (s *Store) Seed(seeds []Seed) (int, error) {
	if len(seeds) == 0 || s.Len() > 0 {
		return 0, nil
	}
	users := make([]user, 0, len(seeds))
	seen := map[string]bool{}
	for _, sd := range seeds {
		if err := ValidateUsername(sd.Username); err != nil {
			return 0, fmt.Errorf("seed user: %w", err)
		}
		if seen[sd.Username] {
			return 0, core.Errorf(core.ErrBadRequest, "seed user %q is listed twice", sd.Username)
		}
		seen[sd.Username] = true
		var h phc
		var err error
		switch hasHash, hasPw := sd.PasswordHash != "", sd.Password.IsSet(); {
		case hasHash && hasPw:
			return 0, core.Errorf(core.ErrBadRequest, "seed user %q has both a password hash and a plain password; give one", sd.Username)
		case hasHash:
			if h, err = parsePHC(sd.PasswordHash); err != nil {
				return 0, fmt.Errorf("seed user %q: %w", sd.Username, err)
			}
		case hasPw:
			if err := validatePassword(sd.Username, sd.Password.Reveal()); err != nil {
				return 0, fmt.Errorf("seed user: %w", err)
			}
			if h, err = newHash(sd.Password.Reveal()); err != nil {
				return 0, err
			}
		default:
			return 0, core.Errorf(core.ErrBadRequest, "seed user %q has neither a password hash nor a password", sd.Username)
		}
		users = append(users, user{UserInfo: UserInfo{Name: sd.Username}, hash: h})
	}
	created := 0
	err := s.update(func(set userSet, now time.Time) error {
		if len(set) > 0 { // someone added a user while we hashed
			return nil
		}
		for _, u := range users {
			u.Created, u.PasswordChanged = now, now
			set[u.Name] = u
		}
		created = len(users)
		return nil
	})
	if err != nil {
		created = 0
	}
	return created, err
}

// update applies change to a copy of the current set, persists the copy
// and then publishes it. If change or the write fails, nothing changes.
func (s *Store) update(change func(set userSet, now time.Time) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shared != nil {
		return s.shared.update(s, change)
	}
	next, err := s.changed(change)
	if err != nil {
		return err
	}
	if err := s.persist(next); err != nil {
		return fmt.Errorf("user store %s: write: %w", s.path, err)
	}
	s.cur.Store(&next)
	return nil
}

// changed returns a copy of the current set with change applied (the
// current one is immutable: readers hold it without locks).
func (s *Store) changed(change func(set userSet, now time.Time) error) (userSet, error) {
	cur := *s.cur.Load()
	next := make(userSet, len(cur)+1)
	for k, v := range cur {
		next[k] = v
	}
	if err := change(next, time.Now().UTC().Truncate(time.Second)); err != nil {
		return nil, err
	}
	return next, nil
}

func (s *Store) persist(set userSet) error {
	return writeFileAtomic(s.path, encodeStore(set))
}

// encodeStore is the inverse of parseStore.
func encodeStore(set userSet) []byte {
	f := fileFormat{Format: formatBase, Users: make([]fileRecord, 0, len(set))}
	for _, u := range set {
		r := fileRecord{
			Name: u.Name, PasswordHash: u.hash.String(),
			Created: u.Created, PasswordChanged: u.PasswordChanged,
		}
		if u.Permissions != nil {
			ps := u.Permissions
			r.Permissions = &ps
			f.Format = formatPermissions
		}
		f.Users = append(f.Users, r)
	}
	slices.SortFunc(f.Users, func(a, b fileRecord) int { return strings.Compare(a.Name, b.Name) })
	data, _ := json.MarshalIndent(f, "", "  ") // plain strings and times: cannot fail
	return append(data, '\n')
}

func conflict(name string) error {
	return core.Errorf(core.ErrConflict, "user %q already exists", name)
}

func notFound(name string) error {
	return core.Errorf(core.ErrNotFound, "user %q does not exist", name)
}

// WriteCopy writes the store as it stands to path, in the store's own
// format (a backup: OpenStore reads it back).
func (s *Store) WriteCopy(path string) error {
	return writeFileAtomic(path, encodeStore(*s.cur.Load()))
}
