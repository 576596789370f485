package auth

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/config"
)

func TestStoreAddListRemove(t *testing.T) {
	s, _ := openTemp(t)
	if s.Len() != 0 || len(s.List()) != 0 {
		t.Fatal("new store is not empty")
	}
	for _, n := range []string{"carol", "alice", "bob"} {
		if err := s.Add(n, "pw-"+n); err != nil {
			t.Fatalf("Add(%s): %v", n, err)
		}
	}
	var names []string
	for _, u := range s.List() {
		names = append(names, u.Name)
		if u.Created.IsZero() || u.PasswordChanged.IsZero() {
			t.Errorf("%s: timestamps not set: %+v", u.Name, u)
		}
	}
	if strings.Join(names, ",") != "alice,bob,carol" {
		t.Fatalf("List order = %v", names)
	}
	if err := s.Add("alice", "x"); !errors.Is(err, core.ErrConflict) {
		t.Fatalf("duplicate Add: %v, want ErrConflict", err)
	}
	if err := s.Remove("bob"); err != nil {
		t.Fatal(err)
	}
	if s.Has("bob") {
		t.Fatal("bob still present after Remove")
	}
	if err := s.Remove("bob"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("Remove of missing user: %v, want ErrNotFound", err)
	}
	if err := s.SetPassword("bob", "x"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("SetPassword of missing user: %v, want ErrNotFound", err)
	}
	if err := s.Add("dave", ""); !errors.Is(err, core.ErrBadRequest) {
		t.Fatalf("empty password: %v, want ErrBadRequest", err)
	}
	if err := s.Add("dave", strings.Repeat("x", MaxPasswordBytes+1)); !errors.Is(err, core.ErrBadRequest) {
		t.Fatalf("huge password: %v, want ErrBadRequest", err)
	}
}

func TestStoreRejectsBadNames(t *testing.T) {
	s, _ := openTemp(t)
	for _, n := range []string{"", "@node", "@admin", "has space", "tab\tname", "nl\n", "\x00", strings.Repeat("a", MaxUsernameBytes+1), "bad\xffutf8"} {
		if err := s.Add(n, "pw"); !errors.Is(err, core.ErrBadRequest) {
			t.Errorf("Add(%q) = %v, want ErrBadRequest", n, err)
		}
	}
	for _, n := range []string{"fibril", "alice@example.com", "svc.orders-1", "josé", strings.Repeat("a", MaxUsernameBytes)} {
		if err := s.Add(n, "pw"); err != nil {
			t.Errorf("Add(%q) = %v", n, err)
		}
	}
}

func TestStoreSetPassword(t *testing.T) {
	s, path := openTemp(t)
	if err := s.Add("alice", "old"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetPassword("alice", "new"); err != nil {
		t.Fatal(err)
	}
	s2, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := s2.lookup("alice")
	if verify("old", h) || !verify("new", h) {
		t.Fatal("SetPassword did not replace the hash on disk")
	}
}

func TestStorePersistsAcrossReopen(t *testing.T) {
	s, path := openTemp(t)
	if err := s.Add("alice", "a-pw"); err != nil {
		t.Fatal(err)
	}
	if err := s.Add("bob", "b-pw"); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("store file mode = %v, want 0600", st.Mode().Perm())
	}
	raw, _ := os.ReadFile(path)
	if strings.Contains(string(raw), "a-pw") {
		t.Fatal("plain password written to disk")
	}
	var f fileFormat
	if err := json.Unmarshal(raw, &f); err != nil || f.Format != 1 || len(f.Users) != 2 {
		t.Fatalf("file content: %v %+v", err, f)
	}

	s2, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(s2.List()) != fmt.Sprint(s.List()) {
		t.Fatalf("reopened List = %v, want %v", s2.List(), s.List())
	}
	h, ok := s2.lookup("alice")
	if !ok || !verify("a-pw", h) {
		t.Fatal("alice's password does not verify after reopen")
	}
}

func TestStoreRejectsDamagedFile(t *testing.T) {
	dir := t.TempDir()
	good, _ := HashPassword("pw")
	cases := map[string]string{
		"not json":      "{users: nope",
		"wrong format":  `{"format": 7, "users": []}`,
		"reserved name": `{"format": 1, "users": [{"name": "@node", "password_hash": "` + good + `"}]}`,
		"bad hash":      `{"format": 1, "users": [{"name": "alice", "password_hash": "hunter2"}]}`,
		"duplicate": `{"format": 1, "users": [{"name": "a", "password_hash": "` + good + `"},` +
			`{"name": "a", "password_hash": "` + good + `"}]}`,
	}
	for name, content := range cases {
		path := filepath.Join(dir, name+".json")
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := OpenStore(path)
		if err == nil {
			t.Errorf("%s: opened", name)
		} else if !strings.Contains(err.Error(), path) {
			t.Errorf("%s: error does not name the file: %v", name, err)
		}
	}
}

// A crash between writing the temporary file and renaming it leaves the
// previous store intact, and the in-memory state does not run ahead of it.
func TestStoreCrashBeforeRename(t *testing.T) {
	s, path := openTemp(t)
	if err := s.Add("alice", "pw"); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	beforeIno := inode(t, path)

	var leftover string
	beforeRename = func(tmp string) error {
		leftover = tmp
		// Simulate the process dying here: keep a copy of the temp file
		// that a real crash would have left behind.
		data, err := os.ReadFile(tmp)
		if err != nil {
			return err
		}
		if err := os.WriteFile(tmp+"-crash", data, 0o600); err != nil {
			return err
		}
		return errors.New("simulated crash")
	}
	err := s.Add("bob", "pw")
	beforeRename = nil
	if err == nil {
		t.Fatal("Add succeeded despite the failed write")
	}
	if s.Has("bob") {
		t.Fatal("memory changed although the write failed")
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Fatal("store file changed by a failed write")
	}
	if _, err := os.Stat(leftover); !os.IsNotExist(err) {
		t.Fatal("failed write left its temporary file")
	}
	// The crash copy matches the temp pattern and is cleaned at open.
	crashCopy := leftover + "-crash"
	s2, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	if s2.Has("bob") || !s2.Has("alice") {
		t.Fatal("reopened store is not the pre-crash one")
	}
	if _, err := os.Stat(crashCopy); !os.IsNotExist(err) {
		t.Fatal("OpenStore kept a crash leftover")
	}

	// A successful write replaces the file (new inode) instead of
	// rewriting it in place.
	if err := s2.Add("bob", "pw"); err != nil {
		t.Fatal(err)
	}
	if inode(t, path) == beforeIno {
		t.Fatal("store file was rewritten in place, not replaced")
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Fatalf("directory holds %d entries after a write, want only the store", len(entries))
	}
}

func TestSeedOnlyWhenEmpty(t *testing.T) {
	s, path := openTemp(t)
	hash, _ := HashPassword("from-file")
	seeds := []Seed{
		{Username: "filed", PasswordHash: hash},
		{Username: "envuser", Password: config.Secret("from-env")},
	}
	n, err := s.Seed(seeds)
	if err != nil || n != 2 {
		t.Fatalf("Seed = %d, %v; want 2, nil", n, err)
	}
	for name, pw := range map[string]string{"filed": "from-file", "envuser": "from-env"} {
		h, ok := s.lookup(name)
		if !ok || !verify(pw, h) {
			t.Fatalf("seeded %s does not verify", name)
		}
	}
	// The store now owns its users: a later boot with a changed seed list
	// changes nothing, even after a removal.
	if err := s.Remove("filed"); err != nil {
		t.Fatal(err)
	}
	s2, _ := OpenStore(path)
	n, err = s2.Seed([]Seed{{Username: "filed", Password: config.Secret("other")}, {Username: "new", Password: config.Secret("x")}})
	if err != nil || n != 0 {
		t.Fatalf("Seed on a non-empty store = %d, %v; want 0, nil", n, err)
	}
	if s2.Has("filed") || s2.Has("new") {
		t.Fatal("seeding a non-empty store created users")
	}
}

func TestSeedAllOrNothing(t *testing.T) {
	hash, _ := HashPassword("pw")
	bad := map[string][]Seed{
		"reserved":  {{Username: "ok", PasswordHash: hash}, {Username: "@node", PasswordHash: hash}},
		"duplicate": {{Username: "a", PasswordHash: hash}, {Username: "a", Password: "x"}},
		"both":      {{Username: "a", PasswordHash: hash, Password: "x"}},
		"neither":   {{Username: "a"}},
		"bad hash":  {{Username: "ok", PasswordHash: hash}, {Username: "b", PasswordHash: "plain"}},
	}
	for name, seeds := range bad {
		s, path := openTemp(t)
		n, err := s.Seed(seeds)
		if err == nil || !errors.Is(err, core.ErrBadRequest) {
			t.Errorf("%s: Seed = %d, %v; want ErrBadRequest", name, n, err)
		}
		if s.Len() != 0 {
			t.Errorf("%s: partial seed created users", name)
		}
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Errorf("%s: failed seed wrote the file", name)
		}
	}
}

func TestStoreConcurrentWriters(t *testing.T) {
	s, path := openTemp(t)
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("user%02d", i)
			if err := s.Add(name, "pw"); err != nil {
				t.Error(err)
			}
			_ = s.List()
			_ = s.Has(name)
			if i%2 == 0 {
				if err := s.Remove(name); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if s.Len() != 8 {
		t.Fatalf("Len = %d, want 8", s.Len())
	}
	s2, err := OpenStore(path)
	if err != nil || s2.Len() != 8 {
		t.Fatalf("reopened: %v, Len = %d", err, s2.Len())
	}
}
