package auth

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"

	"github.com/fibrilgo/fibril/core"
)

// memDoc is a core.Document in memory whose Watch never reports a change:
// a store that follows it sees only what it loads itself, as a broker
// whose view lags behind the coordinator.
type memDoc struct {
	mu   sync.Mutex
	data []byte
	ver  uint64
}

func (d *memDoc) Load(context.Context) ([]byte, uint64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.data, d.ver, nil
}

func (d *memDoc) Swap(_ context.Context, data []byte, version uint64) (uint64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if version != d.ver {
		return 0, core.ErrVersionConflict
	}
	d.data, d.ver = data, d.ver+1
	return d.ver, nil
}

func (d *memDoc) Watch(ctx context.Context, _ uint64) ([]byte, uint64, uint64, error) {
	<-ctx.Done()
	return nil, 0, 0, ctx.Err()
}

// A change refused by a broker's stale copy of the shared store is checked
// against the coordinator's newest document before the refusal stands: a
// user added through one broker can be changed through another at once.
func TestSharedStoreRefusesOnlyAgainstTheNewestDocument(t *testing.T) {
	doc := &memDoc{}
	open := func() *Store {
		s, err := OpenShared(context.Background(), doc, nil, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}
	a, b := open(), open()
	if err := a.Add("app", "app-secret-1"); err != nil {
		t.Fatal(err)
	}
	if b.Has("app") {
		t.Fatal("the test needs b's copy to lag behind")
	}
	if err := b.SetPermissions("app", Permissions{{Topics: []string{"orders*"}, Actions: []Action{"publish"}}}); err != nil {
		t.Fatalf("permissions of a user added through another broker: %v", err)
	}
	if err := b.SetPassword("app", "app-secret-2"); err != nil {
		t.Fatalf("password of a user added through another broker: %v", err)
	}
	if err := a.Add("app", "app-secret-3"); !errors.Is(err, core.ErrConflict) {
		t.Fatalf("adding it again through the first broker: %v, want a conflict", err)
	}
	if err := a.Remove("app"); err != nil {
		t.Fatal(err)
	}
	if err := b.Add("app", "app-secret-4"); err != nil { // b's copy still has it
		t.Fatalf("adding again a user removed through another broker: %v", err)
	}
	// A refusal that holds against the newest document stands.
	if err := b.SetPermissions("nobody", nil); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("permissions of no user: %v, want not found", err)
	}
	if err := b.Remove("nobody"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("removing no user: %v, want not found", err)
	}
}
