package auth

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fibrilgo/fibril/core/config"
)

func secretCfg(env, path, dataDir string) config.Config {
	var c config.Config
	c.Coordination.Secret = config.Secret(env)
	c.Coordination.SecretPath = path
	c.Server.DataDir = dataDir
	return c
}

func TestResolveClusterSecret(t *testing.T) {
	dir := t.TempDir()
	explicit := filepath.Join(dir, "explicit.secret")
	_ = os.WriteFile(explicit, []byte("from-path\r\n"), 0o600)
	withDefault := filepath.Join(dir, "withdefault")
	_ = os.MkdirAll(withDefault, 0o700)
	_ = os.WriteFile(filepath.Join(withDefault, ClusterSecretFile), []byte("from-data-dir\n\n"), 0o600)
	empty := filepath.Join(dir, "empty")
	_ = os.MkdirAll(empty, 0o700)

	cases := []struct {
		name                string
		cfg                 config.Config
		want, origin, errIs string
	}{
		{"env wins", secretCfg("from-env", explicit, withDefault), "from-env", "FIBRIL_CLUSTER_SECRET", ""},
		{"path next", secretCfg("", explicit, withDefault), "from-path", explicit, ""},
		{"data dir last", secretCfg("", "", withDefault), "from-data-dir", filepath.Join(withDefault, ClusterSecretFile), ""},
		{"none", secretCfg("", "", empty), "", "", ""},
		{"no data dir", secretCfg("", "", ""), "", "", ""},
		{"missing explicit path", secretCfg("", filepath.Join(dir, "nope"), withDefault), "", "", "coordination.secret_path"},
	}
	for _, c := range cases {
		got, origin, err := ResolveClusterSecret(c.cfg)
		if c.errIs != "" {
			if err == nil || !strings.Contains(err.Error(), c.errIs) {
				t.Errorf("%s: err = %v, want one mentioning %q", c.name, err, c.errIs)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if string(got) != c.want || !strings.Contains(origin, c.origin) {
			t.Errorf("%s: got %q from %q, want %q from %q", c.name, got, origin, c.want, c.origin)
		}
		if c.want == "" && got != nil {
			t.Errorf("%s: want nil secret, got %q", c.name, got)
		}
	}
}

func TestResolveClusterSecretRefusesEmpty(t *testing.T) {
	dir := t.TempDir()
	for _, content := range []string{"", "\n", "\r\n\n"} {
		_ = os.WriteFile(filepath.Join(dir, ClusterSecretFile), []byte(content), 0o600)
		_, _, err := ResolveClusterSecret(secretCfg("", "", dir))
		if err == nil || !strings.Contains(err.Error(), "empty") {
			t.Errorf("content %q: err = %v, want an empty-secret error", content, err)
		}
		_, _, err = ResolveClusterSecret(secretCfg("", filepath.Join(dir, ClusterSecretFile), ""))
		if err == nil {
			t.Errorf("content %q via secret_path: accepted", content)
		}
	}
	// Inner whitespace and a leading space are part of the secret.
	_ = os.WriteFile(filepath.Join(dir, ClusterSecretFile), []byte(" a b\n"), 0o600)
	got, _, err := ResolveClusterSecret(secretCfg("", "", dir))
	if err != nil || string(got) != " a b" {
		t.Fatalf("got %q, %v", got, err)
	}
}
