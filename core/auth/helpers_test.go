package auth

import (
	"path/filepath"
	"testing"
)

func openTemp(t *testing.T) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "data", StoreFile)
	s, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	return s, path
}
