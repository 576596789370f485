package config

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// TestFileLineNumbers puts an unknown key and a wrong type on known lines
// and expects both, each with its own line.
func TestFileLineNumbers(t *testing.T) {
	path := writeConfig(t, `# line 1
[server]
data_dir = "d"

[broker.listener]
bind = "127.0.0.1:1"
bnid = "127.0.0.1:2"

[storage]
fsync_interval_ms = "fast"
`)
	ps := mustFail(t, []string{"--config", path})
	if len(ps) != 2 {
		t.Fatalf("want 2 problems, got %v", ps)
	}
	p := findProblem(t, ps, path+":7: broker.listener.bnid: unknown key (did you mean broker.listener.bind?)")
	if p.Origins[0].Line != 7 || p.Origins[0].Layer != LayerFile {
		t.Errorf("origin %+v", p.Origins[0])
	}
	findProblem(t, ps, path+":10: storage.fsync_interval_ms: expected an integer, got the string \"fast\"")
}

// TestFileTypeErrors covers strictness of the typed file.
func TestFileTypeErrors(t *testing.T) {
	cases := []struct {
		toml, want string
	}{
		{"[tls]\nenabled = \"true\"\n", `tls.enabled: expected a boolean, got the string "true"`},
		{"[broker]\nmax_frame_bytes = 1.0\n", "expected an integer, got the float 1"},
		{"[broker]\nmax_frame_bytes = 1.5\n", "expected an integer, got the float 1.5"},
		{"[broker.listener]\nadvertise = [\"a.example:1\", 2]\n", "entry 2: expected a string, got the integer 2"},
		{"[log]\nlevel = 3\n", "log.level: expected one of debug, info, warn, error, got the integer 3"},
		{"[broker]\nlistener = \"x\"\n", "broker.listener: is a section, not a value"},
		{"[broker.listener.bind]\nhost = \"x\"\n", "broker.listener.bind: expected a string, got a table"},
		{"[brokr]\nvisibility = \"public\"\n", "brokr.visibility: unknown key (did you mean broker.visibility?)"},
		{"[broker]\nbind = \"x:1\"\n", "broker.bind: unknown key (did you mean broker.listener.bind or broker.peer_listener.bind?)"},
		{"[server]\ndata_dir = \"\"\n", "server.data_dir: must not be empty"},
		{"[broker.listener]\nbind = \"127.0.0.1\"\n", `"127.0.0.1" is not host:port: missing port in address`},
		{"[broker.listener]\nbind = \"127.0.0.1:99999\"\n", `port "99999" is not a number from 0 to 65535`},
		{"[broker]\npeer_advertise = \":7000\"\n", "a dialable address needs a host"},
		{"[coordination]\nbackend = \"My Plugin\"\n", "is not a plugin name"},
		{"[coordination.raft]\npeers = [\"n1=127.0.0.1:1\", \"n1=127.0.0.2:1\"]\n", `node id "n1" is listed twice`},
		{"[coordination.raft]\npeers = [\"127.0.0.1:1\"]\n", "is not id=host:port"},
	}
	for _, c := range cases {
		t.Run(c.want, func(t *testing.T) {
			path := writeConfig(t, c.toml)
			ps := mustFail(t, []string{"--config", path})
			wantOnly(t, ps, path+":2", c.want)
		})
	}
}

// TestFileSyntaxError reports the TOML error with its line.
func TestFileSyntaxError(t *testing.T) {
	path := writeConfig(t, "[server]\ndata_dir = \"x\"\n\nbad line here\n")
	wantOnly(t, mustFail(t, []string{"--config", path}), path+":4", "TOML syntax error")
	path = writeConfig(t, "[server]\ndata_dir = \"x\"\ndata_dir = \"y\"\n")
	wantOnly(t, mustFail(t, []string{"--config", path}), path+":3", "TOML syntax error")
	path = writeConfig(t, "[server]\ndata_dir = \"x\"\n[log]\n[server]\n")
	wantOnly(t, mustFail(t, []string{"--config", path}), path+":4", "TOML syntax error")
}

// TestFileFormsAndLines covers dotted keys, inline tables and an empty
// section, and checks that origins carry the right lines.
func TestFileFormsAndLines(t *testing.T) {
	path := writeConfig(t, `broker.listener.bind = "127.0.0.1:2"
admin = { listener = { bind = "127.0.0.1:3" } }

[tls]

[coordination]
raft.peers = [
  "n1=127.0.0.1:7001",
]
`)
	cfg, ld := mustLoad(t, []string{"--config", path})
	if cfg.Broker.Listener.Bind != "127.0.0.1:2" || cfg.Admin.Listener.Bind != "127.0.0.1:3" || len(cfg.Coordination.Raft.Peers) != 1 {
		t.Errorf("values not read: %+v", cfg)
	}
	for key, line := range map[string]int{"broker.listener.bind": 1, "admin.listener.bind": 2, "coordination.raft.peers": 7} {
		if o := ld.Source(key); o.Line != line || o.Name != path {
			t.Errorf("%s: origin %v, want line %d", key, o, line)
		}
	}
	if len(ld.Warnings) != 1 || !strings.Contains(ld.Warnings[0].String(), "coordination.raft.peers") {
		t.Errorf("raft keys without raft should warn: %v", ld.Warnings)
	}
}

// TestSecretsInFileRejected checks every key the file may not hold.
func TestSecretsInFileRejected(t *testing.T) {
	for _, k := range Keys() {
		if k.Allows(LayerFile) || k.Class == RuntimeOnly {
			continue
		}
		t.Run(k.Name, func(t *testing.T) {
			path := writeConfig(t, fmt.Sprintf("\n[%s]\n%s = \"x\"\n", k.Section(), k.Leaf()))
			p := wantOnly(t, mustFail(t, []string{"--config", path}), path+":3", k.Name, "cannot be set in the config file", k.Env[0])
			if k.Secret && !strings.Contains(p.Msg, "never read from the config file") {
				t.Errorf("message does not say why: %v", p)
			}
		})
	}
	// The *_path / *_file alternatives are named.
	path := writeConfig(t, "[coordination]\nsecret = \"x\"\n[admin.auth]\npassword = \"y\"\n")
	ps := mustFail(t, []string{"--config", path})
	findProblem(t, ps, "coordination.secret", "FIBRIL_CLUSTER_SECRET", "coordination.secret_path")
	findProblem(t, ps, "admin.auth.password", "FIBRIL_ADMIN_AUTH_PASSWORD", "admin.auth.password_file")
}

// TestSeedUsers covers the accepted forms and per-entry errors with lines.
func TestSeedUsers(t *testing.T) {
	path := writeConfig(t, `[auth]
allow_default_loopback = false

[[auth.seed_users]]
username = "app"
password_hash = "`+samplePHC+`"

[[auth.seed_users]]
username = "ops"
password_hash = "`+samplePHC+`"
`)
	cfg, ld := mustLoad(t, []string{"--config", path})
	want := []SeedUser{{"app", samplePHC}, {"ops", samplePHC}}
	if !reflect.DeepEqual(cfg.Auth.SeedUsers, want) {
		t.Errorf("seed users = %+v", cfg.Auth.SeedUsers)
	}
	if o := ld.Source("auth.seed_users"); o.Line != 4 {
		t.Errorf("origin %v, want line 4", o)
	}

	inline := writeConfig(t, "[auth]\nseed_users = [{ username = \"app\", password_hash = \""+samplePHC+"\" }]\n")
	cfg, _ = mustLoad(t, []string{"--config", inline})
	if len(cfg.Auth.SeedUsers) != 1 || cfg.Auth.SeedUsers[0].Username != "app" {
		t.Errorf("inline seed users = %+v", cfg.Auth.SeedUsers)
	}

	bad := writeConfig(t, `[[auth.seed_users]]
username = "app"
password_hash = "`+samplePHC+`"

[[auth.seed_users]]
username = "@node"
password_hash = "hunter2"

[[auth.seed_users]]
username = "app"
password = "plain"
role = "admin"

[[auth.seed_users]]
password_hash = "$argon2id$v=19$m=65536,t=3$c2FsdA$aGFzaA"
`)
	ps := mustFail(t, []string{"--config", bad})
	findProblem(t, ps, bad+":6: auth.seed_users[1].username", "reserved")
	findProblem(t, ps, bad+":7: auth.seed_users[1].password_hash", "argon2id PHC")
	findProblem(t, ps, bad+":10: auth.seed_users[2].username", "already listed as auth.seed_users[0]")
	findProblem(t, ps, bad+":11: auth.seed_users[2].password", "plain passwords never come from the config file")
	findProblem(t, ps, bad+":12: auth.seed_users[2].role", "unknown field")
	findProblem(t, ps, bad+":14: auth.seed_users[3]", "missing username")
	findProblem(t, ps, bad+":15: auth.seed_users[3].password_hash", "parameters m, t and p are all required")
	if len(ps) != 7 {
		t.Errorf("want 7 problems, got %d: %v", len(ps), ps)
	}

	single := writeConfig(t, "[auth.seed_users]\nusername = \"app\"\n")
	wantOnly(t, mustFail(t, []string{"--config", single}), "auth.seed_users", "write [[auth.seed_users]]")
	ps = mustFail(t, []string{"--auth.seed_users=app"})
	wantOnly(t, ps, "flag --auth.seed_users", "only in the config file")
}

func TestCheckArgon2idPHC(t *testing.T) {
	if err := checkArgon2idPHC(samplePHC); err != nil {
		t.Errorf("valid hash rejected: %v", err)
	}
	for _, bad := range []string{
		"", "hunter2", "$argon2i$v=19$m=1,t=1,p=1$c2FsdA$aGFzaA", "$argon2id$v=16$m=1,t=1,p=1$c2FsdA$aGFzaA",
		"$argon2id$v=19$m=0,t=1,p=1$c2FsdA$aGFzaA", "$argon2id$v=19$m=1,t=1,p=1,p=1$c2FsdA$aGFzaA",
		"$argon2id$v=19$m=1,t=1,p=1$$aGFzaA", "$argon2id$v=19$m=1,t=1,p=1$c2FsdA$not*base64",
	} {
		if checkArgon2idPHC(bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestScanLines(t *testing.T) {
	lines, err := scanLines([]byte(`a = 1
[b]
c.d = [
  { e = 1 },
  "x",
]
[[f]]
g = 1
[[f]]
g = 2
[f.h]
i = 3
`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{
		"a": 1, "b": 2, "b.c.d": 3, "b.c.d[0]": 4, "b.c.d[0].e": 4, "b.c.d[1]": 5,
		"f": 7, "f[0]": 7, "f[0].g": 8, "f[1]": 9, "f[1].g": 10, "f[1].h": 11, "f[1].h.i": 12,
	}
	if !reflect.DeepEqual(lines, want) {
		t.Errorf("scanLines =\n%v\nwant\n%v", lines, want)
	}
}
