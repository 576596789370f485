package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestPrecedence sets one key in all four layers and removes them from the
// top down: each time the next layer must win and be named as the origin.
func TestPrecedence(t *testing.T) {
	path := writeConfig(t, "[broker.listener]\nbind = \"127.0.0.2:1000\"\n")
	env := "FIBRIL_BROKER_BIND=127.0.0.3:1000"
	flag := "--broker.listener.bind=127.0.0.4:1000"
	cases := []struct {
		name    string
		args    []string
		environ []string
		want    string
		origin  string
	}{
		{"flag beats env, file, default", []string{"--config", path, flag}, []string{env}, "127.0.0.4:1000", "flag --broker.listener.bind"},
		{"env beats file, default", []string{"--config", path}, []string{env}, "127.0.0.3:1000", "env FIBRIL_BROKER_BIND"},
		{"file beats default", []string{"--config", path}, nil, "127.0.0.2:1000", path + ":2"},
		{"default", nil, nil, "127.0.0.1:9876", "default"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, ld := mustLoad(t, c.args, c.environ...)
			if cfg.Broker.Listener.Bind != c.want {
				t.Errorf("bind = %q, want %q", cfg.Broker.Listener.Bind, c.want)
			}
			if got := ld.Source("broker.listener.bind").String(); got != c.origin {
				t.Errorf("origin = %q, want %q", got, c.origin)
			}
		})
	}
}

// TestConfigFileLocation covers --config, FIBRIL_CONFIG, their precedence
// and --config="" meaning "no file".
func TestConfigFileLocation(t *testing.T) {
	a := writeConfig(t, "[server]\ndata_dir = \"from-a\"\n")
	b := writeConfig(t, "[server]\ndata_dir = \"from-b\"\n")

	cfg, ld := mustLoad(t, nil, "FIBRIL_CONFIG="+a)
	if cfg.Server.DataDir != "from-a" || ld.ConfigFile != a {
		t.Errorf("FIBRIL_CONFIG: data_dir %q, file %q", cfg.Server.DataDir, ld.ConfigFile)
	}
	cfg, _ = mustLoad(t, []string{"--config", b}, "FIBRIL_CONFIG="+a)
	if cfg.Server.DataDir != "from-b" {
		t.Errorf("--config must beat FIBRIL_CONFIG, got %q", cfg.Server.DataDir)
	}
	cfg, ld = mustLoad(t, []string{"--config="}, "FIBRIL_CONFIG="+a)
	if cfg.Server.DataDir != "server_data" || ld.ConfigFile != "" {
		t.Errorf(`--config="" must disable the file, got %q from %q`, cfg.Server.DataDir, ld.ConfigFile)
	}

	ps := mustFail(t, nil, "FIBRIL_CONFIG=/nonexistent/fibril.toml")
	wantOnly(t, ps, "env FIBRIL_CONFIG", "/nonexistent/fibril.toml")
	ps = mustFail(t, []string{"--config", "/nonexistent/x.toml"})
	wantOnly(t, ps, "flag --config", "/nonexistent/x.toml")
}

// TestEnvMapping checks the explicit env names, including ones that do
// not follow the key name.
func TestEnvMapping(t *testing.T) {
	cfg, ld := mustLoad(t, nil,
		"FIBRIL_DATA_DIR=/var/lib/fibril",
		"FIBRIL_BROKER_BIND=0.0.0.0:9876",
		"FIBRIL_BROKER_PEER_BIND=:7000",
		"FIBRIL_ADMIN_BIND=0.0.0.0:8081",
		"FIBRIL_CLUSTER_SECRET_PATH=/run/secrets/cluster",
		"FIBRIL_COORDINATION_BACKEND=raft",
		"FIBRIL_COORDINATION_RAFT_PEERS=a=127.0.0.1:7001, b=127.0.0.2:7001",
		"FIBRIL_TLS_CLIENT_AUTH=REQUEST",
		"FIBRIL_TLS_ENABLED=yes",
		"FIBRIL_TLS_AUTO_SELF_SIGNED=1",
		"FIBRIL_RUNTIME_SEED_PARTITIONING_DEFAULT_PARTITION_COUNT=8",
		"FIBRIL_LOG_FORMAT=json",
	)
	checks := map[string]bool{
		"data dir":    cfg.Server.DataDir == "/var/lib/fibril",
		"bind":        cfg.Broker.Listener.Bind == "0.0.0.0:9876",
		"peer bind":   cfg.Broker.PeerListener.Bind == ":7000",
		"admin bind":  cfg.Admin.Listener.Bind == "0.0.0.0:8081",
		"secret path": cfg.Coordination.SecretPath == "/run/secrets/cluster",
		"backend":     cfg.Coordination.Backend == "raft",
		"peers":       slices.Equal(cfg.Coordination.Raft.Peers, []string{"a=127.0.0.1:7001", "b=127.0.0.2:7001"}),
		"client auth": cfg.TLS.ClientAuth == ClientAuthRequest,
		"tls":         cfg.TLS.Enabled && cfg.TLS.AutoSelfSigned && cfg.TLS.AdminEnabled && cfg.TLS.InterBroker,
		"partitions":  cfg.RuntimeSeed.Partitioning.DefaultPartitionCount == 8,
		"log format":  cfg.Log.Format == "json",
	}
	for what, ok := range checks {
		if !ok {
			t.Errorf("%s not mapped: %+v", what, cfg)
		}
	}
	if o := ld.Source("coordination.secret_path"); o.String() != "env FIBRIL_CLUSTER_SECRET_PATH" {
		t.Errorf("secret_path origin %v", o)
	}
	peers, err := cfg.Coordination.Raft.ParsedPeers()
	if err != nil || len(peers) != 2 || peers[1] != (RaftPeer{ID: "b", Addr: "127.0.0.2:7001"}) {
		t.Errorf("ParsedPeers = %v, %v", peers, err)
	}
}

// TestEnvEveryKey sets every env-settable key through its canonical
// variable and checks it lands in the right field.
func TestEnvEveryKey(t *testing.T) {
	for _, k := range Keys() {
		if !k.Allows(LayerEnv) {
			continue
		}
		t.Run(k.Name, func(t *testing.T) {
			s, ok := samples[k.Name]
			if !ok {
				t.Fatalf("no sample value for %s in samples", k.Name)
			}
			environ := append([]string{k.Env[0] + "=" + s.text}, s.env...)
			cfg, ld := mustLoad(t, nil, environ...)
			got, _ := ValueOf(cfg, k.Name)
			if !reflect.DeepEqual(got, s.want) {
				t.Errorf("%s=%q gave %#v, want %#v", k.Env[0], s.text, got, s.want)
			}
			if o := ld.Source(k.Name); o.Layer != LayerEnv || o.Name != k.Env[0] {
				t.Errorf("origin %v", o)
			}
		})
	}
}

// TestLegacyEnvNames covers the S-171 variables and the rule that the
// canonical name wins over a legacy one.
func TestLegacyEnvNames(t *testing.T) {
	cfg, ld := mustLoad(t, nil, "FIBRIL_RECONNECT_GRACE_MS=7000", "FIBRIL_RESUME_SESSION_RESTART_TTL_MS=0")
	if cfg.RuntimeSeed.Connection.ReconnectGraceMS != 7000 || cfg.RuntimeSeed.Connection.ResumeSessionRestartTTLMS != 0 {
		t.Errorf("legacy names not mapped: %+v", cfg.RuntimeSeed.Connection)
	}
	if o := ld.Source("runtime_seed.connection.reconnect_grace_ms"); o.String() != "env FIBRIL_RECONNECT_GRACE_MS" {
		t.Errorf("origin %v", o)
	}
	if len(ld.Warnings) != 0 {
		t.Errorf("legacy names alone must not warn: %v", ld.Warnings)
	}

	cfg, ld = mustLoad(t, nil, "FIBRIL_RECONNECT_GRACE_MS=7000", "FIBRIL_RUNTIME_SEED_CONNECTION_RECONNECT_GRACE_MS=9000")
	if cfg.RuntimeSeed.Connection.ReconnectGraceMS != 9000 {
		t.Errorf("canonical name must win, got %d", cfg.RuntimeSeed.Connection.ReconnectGraceMS)
	}
	w := warningFor(t, ld, "FIBRIL_RECONNECT_GRACE_MS")
	if !strings.Contains(w.Msg, "FIBRIL_RUNTIME_SEED_CONNECTION_RECONNECT_GRACE_MS") {
		t.Errorf("warning should name the winner: %v", w)
	}
}

// TestLegacyFlagTwins covers the S-171 kebab-case flags.
func TestLegacyFlagTwins(t *testing.T) {
	cfg, ld := mustLoad(t, []string{"--reconnect-grace-ms", "100", "--resume-session-restart-ttl-ms=200"})
	if cfg.RuntimeSeed.Connection.ReconnectGraceMS != 100 || cfg.RuntimeSeed.Connection.ResumeSessionRestartTTLMS != 200 {
		t.Errorf("twins not mapped: %+v", cfg.RuntimeSeed.Connection)
	}
	if o := ld.Source("runtime_seed.connection.reconnect_grace_ms"); o.String() != "flag --reconnect-grace-ms" {
		t.Errorf("origin %v", o)
	}
	// The later flag wins, whichever spelling it uses.
	cfg, _ = mustLoad(t, []string{"--reconnect-grace-ms=1", "--runtime_seed.connection.reconnect_grace_ms=2"})
	if cfg.RuntimeSeed.Connection.ReconnectGraceMS != 2 {
		t.Errorf("last flag should win, got %d", cfg.RuntimeSeed.Connection.ReconnectGraceMS)
	}
}

// TestEnvUserPair covers FIBRIL_AUTH_USERNAME + FIBRIL_AUTH_PASSWORD.
func TestEnvUserPair(t *testing.T) {
	cfg, _ := mustLoad(t, nil, "FIBRIL_AUTH_USERNAME=app", "FIBRIL_AUTH_PASSWORD=pw")
	if cfg.Auth.EnvUser.Username != "app" || cfg.Auth.EnvUser.Password.Reveal() != "pw" {
		t.Errorf("env user = %+v", cfg.Auth.EnvUser)
	}
	seeds := cfg.Auth.Seeds()
	if len(seeds) != 1 || seeds[0].Username != "app" || seeds[0].Password.Reveal() != "pw" || seeds[0].PasswordHash != "" {
		t.Errorf("Seeds() = %+v", seeds)
	}

	ps := mustFail(t, nil, "FIBRIL_AUTH_USERNAME=app")
	p := wantOnly(t, ps, "must be set together", "auth.env_user.username", "env FIBRIL_AUTH_USERNAME", "auth.env_user.password")
	if len(p.Keys) != 2 {
		t.Errorf("keys %v", p.Keys)
	}
	ps = mustFail(t, nil, "FIBRIL_AUTH_PASSWORD=pw")
	wantOnly(t, ps, "must be set together", "env FIBRIL_AUTH_PASSWORD")

	ps = mustFail(t, nil, "FIBRIL_AUTH_USERNAME=@node", "FIBRIL_AUTH_PASSWORD=pw")
	findProblem(t, ps, "env FIBRIL_AUTH_USERNAME", "reserved")

	path := writeConfig(t, "[[auth.seed_users]]\nusername = \"app\"\npassword_hash = \""+samplePHC+"\"\n")
	ps = mustFail(t, []string{"--config", path}, "FIBRIL_AUTH_USERNAME=app", "FIBRIL_AUTH_PASSWORD=pw")
	wantOnly(t, ps, "seeded twice", "auth.seed_users", path+":1")

	for _, args := range [][]string{{"--auth.env_user.username=x"}, {"--auth.env_user.password=x"}} {
		ps = mustFail(t, args)
		wantOnly(t, ps, "cannot be set by a flag", "FIBRIL_AUTH_")
	}
}

// Every secret variable has a _FILE form naming a file that holds the
// secret (Docker and Kubernetes secrets): read without its final line
// break; both forms at once, an unreadable or empty file, and _FILE on a
// variable that is not a secret are refused or ignored with a clear word.
func TestSecretFileVariables(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte("s3cret\r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, ld := mustLoad(t, nil, "FIBRIL_AUTH_USERNAME=app", "FIBRIL_AUTH_PASSWORD_FILE="+pw, "FIBRIL_CONSUL_TOKEN_FILE="+pw,
		"FIBRIL_ADMIN_AUTH_PASSWORD_FILE="+pw) // the last is admin.auth.password_file's own variable
	if cfg.Auth.EnvUser.Password.Reveal() != "s3cret" || cfg.Coordination.Consul.Token.Reveal() != "s3cret" || cfg.Admin.Auth.PasswordFile != pw {
		t.Fatalf("secrets from files: %q %q %q", cfg.Auth.EnvUser.Password.Reveal(), cfg.Coordination.Consul.Token.Reveal(), cfg.Admin.Auth.PasswordFile)
	}
	if o := ld.Source("auth.env_user.password"); o.Name != "FIBRIL_AUTH_PASSWORD_FILE" {
		t.Errorf("origin %v", o)
	}
	ps := mustFail(t, nil, "FIBRIL_AUTH_USERNAME=app", "FIBRIL_AUTH_PASSWORD=pw", "FIBRIL_AUTH_PASSWORD_FILE="+pw)
	wantOnly(t, ps, "not both", "FIBRIL_AUTH_PASSWORD_FILE")
	ps = mustFail(t, nil, "FIBRIL_AUTH_USERNAME=app", "FIBRIL_AUTH_PASSWORD_FILE="+filepath.Join(dir, "missing"))
	findProblem(t, ps, "env FIBRIL_AUTH_PASSWORD_FILE", "cannot read the secret file")
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ps = mustFail(t, nil, "FIBRIL_AUTH_USERNAME=app", "FIBRIL_AUTH_PASSWORD_FILE="+empty)
	findProblem(t, ps, "env FIBRIL_AUTH_PASSWORD_FILE", "is empty")
	_, ld = mustLoad(t, nil, "FIBRIL_BROKER_BIND_FILE="+pw)
	if len(ld.Warnings) != 1 || !strings.Contains(ld.Warnings[0].Subject, "FIBRIL_BROKER_BIND_FILE") {
		t.Errorf("a _FILE form of a setting that is not secret: warnings %v", ld.Warnings)
	}
}

// TestListParsing covers comma-separated lists from env and flags.
func TestListParsing(t *testing.T) {
	cfg, _ := mustLoad(t, nil, "FIBRIL_BROKER_ADVERTISE= gw.example.com:9876 ,127.0.0.1:9876,, ")
	if want := []string{"gw.example.com:9876", "127.0.0.1:9876"}; !slices.Equal(cfg.Broker.Listener.Advertise, want) {
		t.Errorf("env list = %q, want %q", cfg.Broker.Listener.Advertise, want)
	}
	cfg, ld := mustLoad(t, []string{"--broker.listener.advertise", "a.example:1,b.example:2", "--broker.listener.advertise=c.example:3"},
		"FIBRIL_BROKER_ADVERTISE=z.example:9")
	if want := []string{"a.example:1", "b.example:2", "c.example:3"}; !slices.Equal(cfg.Broker.Listener.Advertise, want) {
		t.Errorf("flag list = %q, want %q (repeats add, env replaced)", cfg.Broker.Listener.Advertise, want)
	}
	if o := ld.Source("broker.listener.advertise"); o.Layer != LayerFlag {
		t.Errorf("origin %v", o)
	}
	path := writeConfig(t, "[broker.listener]\nadvertise = \"x.example:1, y.example:2\"\n")
	cfg, _ = mustLoad(t, []string{"--config", path})
	if want := []string{"x.example:1", "y.example:2"}; !slices.Equal(cfg.Broker.Listener.Advertise, want) {
		t.Errorf("file string list = %q, want %q", cfg.Broker.Listener.Advertise, want)
	}

	ps := mustFail(t, nil, "FIBRIL_BROKER_ADVERTISE=gw.example.com:9876,nohost")
	wantOnly(t, ps, "env FIBRIL_BROKER_ADVERTISE", "entry 2", "nohost")
}

// TestEmptyEnvIsUnset checks that FOO= does not override lower layers.
func TestEmptyEnvIsUnset(t *testing.T) {
	cfg, ld := mustLoad(t, nil, "FIBRIL_DATA_DIR=", "FIBRIL_BROKER_MAX_FRAME_BYTES=")
	if cfg.Server.DataDir != "server_data" || ld.Source("server.data_dir").Layer != LayerDefault {
		t.Errorf("empty variable overrode the default: %q", cfg.Server.DataDir)
	}
}

// TestFlagsEveryKey sets every flag-settable key by flag and checks the
// field and the origin.
func TestFlagsEveryKey(t *testing.T) {
	for _, k := range Keys() {
		if !k.Allows(LayerFlag) {
			continue
		}
		t.Run(k.Name, func(t *testing.T) {
			s, ok := samples[k.Name]
			if !ok {
				t.Fatalf("no sample value for %s in samples", k.Name)
			}
			cfg, ld := mustLoad(t, []string{"--" + k.Name + "=" + s.text}, s.env...)
			got, _ := ValueOf(cfg, k.Name)
			if !reflect.DeepEqual(got, s.want) {
				t.Errorf("--%s=%q gave %#v, want %#v", k.Name, s.text, got, s.want)
			}
			if o := ld.Source(k.Name); o.String() != "flag --"+k.Name {
				t.Errorf("origin %v", o)
			}
			// Space-separated form too (booleans only take "=").
			if k.Kind != KindBool && k.Kind != KindOptBool {
				cfg, _ = mustLoad(t, []string{"--" + k.Name, s.text}, s.env...)
				if got, _ := ValueOf(cfg, k.Name); !reflect.DeepEqual(got, s.want) {
					t.Errorf("--%s %q gave %#v", k.Name, s.text, got)
				}
			}
		})
	}
}

// TestBoolFlagForms covers bare boolean flags and the "--flag false" slip.
func TestBoolFlagForms(t *testing.T) {
	cfg, _ := mustLoad(t, []string{"--admin.metrics_per_channel=false", "--auth.allow_default_loopback=0"})
	if cfg.Admin.MetricsPerChannel || cfg.Auth.AllowDefaultLoopback {
		t.Errorf("=false not applied: %+v", cfg)
	}
	cfg, _ = mustLoad(t, []string{"--tls.auto_self_signed", "--tls.enabled"})
	if !cfg.TLS.Enabled || !cfg.TLS.AutoSelfSigned {
		t.Errorf("bare flags not applied")
	}
	ps := mustFail(t, []string{"--admin.metrics_per_channel", "false"})
	wantOnly(t, ps, "flag --admin.metrics_per_channel", "--admin.metrics_per_channel=false")
}

// TestUnknownFlags checks that every bad flag is reported with a hint.
func TestUnknownFlags(t *testing.T) {
	ps := mustFail(t, []string{"--broker.listner.bind", "127.0.0.1:1", "--nonsense=1", "--log.level", "loud", "stray"})
	findProblem(t, ps, "flag --broker.listner.bind", "unknown flag", "did you mean --broker.listener.bind?")
	findProblem(t, ps, "flag --nonsense", "unknown flag")
	findProblem(t, ps, "flag --log.level", `"loud" is not one of debug, info, warn, error`)
	findProblem(t, ps, `unexpected argument "stray"`)
	if len(ps) != 4 {
		t.Errorf("want 4 problems, got %d: %v", len(ps), ps)
	}
}

// TestBadFlagSyntax checks that malformed flags are reported and that
// parsing still moves on (the flag package does not consume them).
func TestBadFlagSyntax(t *testing.T) {
	ps := mustFail(t, []string{"---x", "-=y", "--log.level=warn", "--broker.listener.bind"})
	findProblem(t, ps, "bad flag syntax: ---x")
	findProblem(t, ps, "bad flag syntax: -=y")
	findProblem(t, ps, "flag needs an argument: -broker.listener.bind")
	if len(ps) != 3 {
		t.Errorf("want 3 problems, got %v", ps)
	}
}

// TestHelp returns ErrHelp.
func TestHelp(t *testing.T) {
	for _, a := range []string{"-h", "--help"} {
		if _, _, err := Load([]string{a}, nil); !errors.Is(err, ErrHelp) {
			t.Errorf("%s: err = %v", a, err)
		}
	}
}

// TestSecretsOnlyFromEnv covers secrets set by flag (refused) and by env.
func TestSecretsOnlyFromEnv(t *testing.T) {
	for _, k := range Keys() {
		if !k.Secret {
			continue
		}
		ps := mustFail(t, []string{"--" + k.Name + "=x"})
		wantOnly(t, ps, "flag --"+k.Name, "never taken from a flag", k.Env[0])
	}
}

// TestRuntimeOnlyRejected checks that every routing.* key is refused from
// each layer with an explanation.
func TestRuntimeOnlyRejected(t *testing.T) {
	for _, k := range Keys() {
		if k.Class != RuntimeOnly {
			continue
		}
		t.Run(k.Name, func(t *testing.T) {
			const why = "runtime settings document"
			p := wantOnly(t, mustFail(t, []string{"--" + k.Name + "=5"}), "flag --"+k.Name, why)
			if p.Keys[0] != k.Name {
				t.Errorf("keys %v", p.Keys)
			}
			wantOnly(t, mustFail(t, nil, k.Env[0]+"=5"), "env "+k.Env[0], k.Name, why)
			path := writeConfig(t, "# limits\n["+k.Section()+"]\n"+k.Leaf()+" = 5\n")
			wantOnly(t, mustFail(t, []string{"--config", path}), path+":3", k.Name, why)
		})
	}
}

// TestUnknownEnvWarns checks that unknown FIBRIL_* variables warn instead
// of failing, with a typo hint for near misses, and that other variables
// are ignored silently.
func TestUnknownEnvWarns(t *testing.T) {
	_, ld := mustLoad(t, nil, "FIBRIL_BROKER_BND=0.0.0.0:1", "FIBRIL_CLIENT_URL=fibril://x", "HOME=/root", "FIBRIL_DATADIR=/x")
	if len(ld.Warnings) != 3 {
		t.Errorf("want 3 warnings, got %v", ld.Warnings)
	}
	if w := warningFor(t, ld, "FIBRIL_BROKER_BND"); !strings.Contains(w.Msg, "typo for FIBRIL_BROKER_BIND") {
		t.Errorf("no typo hint: %v", w)
	}
	if w := warningFor(t, ld, "FIBRIL_DATADIR"); !strings.Contains(w.Msg, "typo for FIBRIL_DATA_DIR") {
		t.Errorf("no typo hint: %v", w)
	}
	if w := warningFor(t, ld, "FIBRIL_CLIENT_URL"); strings.Contains(w.Msg, "typo") {
		t.Errorf("unrelated name called a typo: %v", w)
	}
}

// TestAllProblemsAtOnce mixes problems from every layer.
func TestAllProblemsAtOnce(t *testing.T) {
	path := writeConfig(t, "[storage]\nfsync = \"sometimes\"\n")
	ps := mustFail(t, []string{"--config", path, "--coordination.heartbeat_interval_ms=0"},
		"FIBRIL_BROKER_MAX_FRAME_BYTES=big")
	findProblem(t, ps, path+":2", "storage.fsync", `"sometimes" is not one of always, interval, none`)
	findProblem(t, ps, "env FIBRIL_BROKER_MAX_FRAME_BYTES", `"big" is not an integer`)
	findProblem(t, ps, "flag --coordination.heartbeat_interval_ms", "below the minimum 1")
	if len(ps) != 3 {
		t.Errorf("want 3 problems, got %d: %v", len(ps), ps)
	}
}
