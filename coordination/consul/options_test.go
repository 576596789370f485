package consul

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/plugins"
)

// The index a Coordinator returns never goes backwards, even when
// Consul's does (tombstones reaped, a restored snapshot); an index from
// before a reset blocks on Consul's index 0, that is, answers at once.
func TestIndexClockMonotonic(t *testing.T) {
	var k indexClock
	seq := []uint64{5, 9, 9, 3, 4, 100, 2}
	last := uint64(0)
	for _, raw := range seq {
		got := k.observe(raw)
		if got < last {
			t.Fatalf("observe(%d) = %d after %d: went backwards", raw, got, last)
		}
		last = got
	}
	if k.raw(last) != 2 {
		t.Fatalf("raw(%d) = %d, want Consul's current 2", last, k.raw(last))
	}
	if k.raw(1) != 0 {
		t.Fatalf("an index from before the reset must block on 0 (answer at once), got %d", k.raw(1))
	}
	if got := k.observe(0); got <= last {
		t.Fatalf("observe(0) = %d, not past %d", got, last)
	}
}

// Every configuration error names the key at fault.
func TestOptionsErrorsNameTheKey(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		cfg  map[string]string
		want string
	}{
		{map[string]string{KeyAddresses: "ftp://x:1"}, KeyAddresses},
		{map[string]string{KeyAddresses: "nohost"}, KeyAddresses},
		{map[string]string{KeySessionTTL: "5000"}, KeySessionTTL},
		{map[string]string{KeySessionTTL: "ten"}, KeySessionTTL},
		{map[string]string{KeyTokenPath: filepath.Join(dir, "missing")}, KeyTokenPath},
		{map[string]string{KeyTokenPath: empty}, KeyTokenPath},
		{map[string]string{KeyCertPath: "/x"}, KeyKeyPath},
		{map[string]string{KeyCAPath: filepath.Join(dir, "missing.pem")}, KeyCAPath},
		{map[string]string{KeyPrefix: "a//b"}, KeyPrefix},
	}
	for _, tc := range cases {
		_, err := OptionsFromEnv(plugins.CoordinationEnv{NodeID: "n1", Config: tc.cfg})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
}

func TestOptionsDefaults(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := OptionsFromEnv(plugins.CoordinationEnv{NodeID: "n1", Config: map[string]string{KeyTokenPath: tok, KeyPrefix: "/team/a/"}})
	if err != nil {
		t.Fatal(err)
	}
	if o.Token != "s3cret" || o.Prefix != "team/a" || o.SessionTTL != 10*time.Second || len(o.Addresses) != 1 || o.Addresses[0] != DefaultAddress {
		t.Fatalf("options %+v", o)
	}
	cl, _, err := o.newClient("https://consul.example:8501")
	if err != nil || cl == nil {
		t.Fatalf("newClient: %v", err)
	}
}
