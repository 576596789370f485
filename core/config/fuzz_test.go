package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzLoad feeds arbitrary files, flags and environment to Load. It must
// never panic or hang, and every failure must come back as Problems.
func FuzzLoad(f *testing.F) {
	f.Add("[server]\ndata_dir = \"x\"\n", "--log.level=debug", "FIBRIL_BROKER_BIND=127.0.0.1:1")
	f.Add("[[auth.seed_users]]\nusername = \"a\"\npassword_hash = \""+samplePHC+"\"\n", "---x\x00-=y", "FIBRIL_AUTH_USERNAME=a")
	f.Add("a.b.c = [{d = 1}, 2]\n[a]\n", "--tls.enabled\x00false", "FIBRIL_X=")
	f.Add("broker = { listener = { bind = 1 } }", "--broker.listener.advertise\x00a:1,b", "FIBRIL_RECONNECT_GRACE_MS=-1")
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, file, args, env string) {
		path := filepath.Join(dir, "fuzz.toml")
		if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
			t.Fatal(err)
		}
		argv := append([]string{"--config", path}, strings.Split(args, "\x00")...)
		cfg, ld, err := Load(argv, strings.Split(env, "\x00"))
		switch {
		case err == ErrHelp:
		case err != nil:
			if cfg != nil || len(Problems(err)) == 0 {
				t.Fatalf("error without problems (or with a config): %v", err)
			}
		case cfg == nil || ld == nil:
			t.Fatal("success without a config")
		}
	})
}
