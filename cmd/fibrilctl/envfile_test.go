package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// ctlEnv runs fibrilctl with exactly the given environment (nothing of
// the real one: no HOME, so no default env file unless vars set one).
func ctlEnv(t *testing.T, vars map[string]string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: func(k string) string { return vars[k] }}
	code := run(ctx, args, e)
	return result{out.String(), errb.String(), code}
}

// globalsFor resolves the global defaults as run does, from vars and the
// env file args name.
func globalsFor(t *testing.T, vars map[string]string, args ...string) (globals, error) {
	t.Helper()
	e, err := withEnvFile(&env{getenv: func(k string) string { return vars[k] }}, args)
	if err != nil {
		return globals{}, err
	}
	return defaultGlobals(e)
}

func writeFile(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

const sampleEnvFile = `# the staging cluster
FIBRIL_ADDR=10.0.0.1:9876,10.0.0.2:9876
export FIBRIL_USER=app
FIBRIL_PASSWORD="pa ss=word"
FIBRIL_TLS=true
FIBRIL_CA='/etc/fibril/ca.pem'
FIBRIL_INSECURE=0

FIBRIL_ADMIN_ADDR = 10.0.0.1:8081
FIBRIL_ADMIN_USER=ops
FIBRIL_ADMIN_PASSWORD=s3cret
FIBRIL_ADMIN_TLS=1
FIBRIL_TIMEOUT=3s
`

func TestEnvFileSetsTheGlobals(t *testing.T) {
	path := writeFile(t, filepath.Join(t.TempDir(), "staging.env"), sampleEnvFile)
	g, err := globalsFor(t, nil, "--env-file", path, "cluster")
	if err != nil {
		t.Fatal(err)
	}
	want := globals{addr: "10.0.0.1:9876,10.0.0.2:9876", user: "app", password: "pa ss=word", tls: true, ca: "/etc/fibril/ca.pem",
		admin: "10.0.0.1:8081", adminUser: "ops", adminPass: "s3cret", adminTLS: true, timeout: 3 * time.Second}
	if g != want {
		t.Fatalf("globals\n got %+v\nwant %+v", g, want)
	}
	// The real environment wins over the file.
	g, err = globalsFor(t, map[string]string{"FIBRIL_USER": "envuser", "FIBRIL_TLS": "false", "FIBRILCTL_ENV_FILE": path})
	if err != nil {
		t.Fatal(err)
	}
	if g.user != "envuser" || g.tls || g.adminUser != "ops" {
		t.Fatalf("environment over file: %+v", g)
	}
	// --env-file=PATH after the command, and --env-file over FIBRILCTL_ENV_FILE.
	other := writeFile(t, filepath.Join(t.TempDir(), "other.env"), "FIBRIL_USER=other\n")
	g, err = globalsFor(t, map[string]string{"FIBRILCTL_ENV_FILE": path}, "cluster", "--env-file="+other)
	if err != nil || g.user != "other" || g.adminUser != "" {
		t.Fatalf("--env-file=PATH: %+v %v", g, err)
	}
}

// The default env file is $XDG_CONFIG_HOME/fibrilctl/env, else
// $HOME/.config/fibrilctl/env, read when it exists; both come through the
// getenv seam, so the test's home is a temporary directory.
func TestDefaultEnvFile(t *testing.T) {
	home := t.TempDir()
	if g, err := globalsFor(t, map[string]string{"HOME": home}); err != nil || g.user != "" {
		t.Fatalf("no default file: %+v %v", g, err)
	}
	writeFile(t, filepath.Join(home, ".config", "fibrilctl", "env"), "FIBRIL_USER=from-home\n")
	if g, err := globalsFor(t, map[string]string{"HOME": home}); err != nil || g.user != "from-home" {
		t.Fatalf("~/.config/fibrilctl/env: %+v %v", g, err)
	}
	xdg := t.TempDir()
	writeFile(t, filepath.Join(xdg, "fibrilctl", "env"), "FIBRIL_USER=from-xdg\n")
	if g, err := globalsFor(t, map[string]string{"HOME": home, "XDG_CONFIG_HOME": xdg}); err != nil || g.user != "from-xdg" {
		t.Fatalf("$XDG_CONFIG_HOME/fibrilctl/env: %+v %v", g, err)
	}
	// A named file must exist; the default one need not.
	missing := filepath.Join(home, "nope.env")
	if _, err := globalsFor(t, map[string]string{"FIBRILCTL_ENV_FILE": missing}); err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("missing FIBRILCTL_ENV_FILE: %v", err)
	}
}

func TestEnvFileErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ content, want string }{
		{"FIBRIL_USER=a\n\nthis line is wrong\n", "line 3: not KEY=VALUE"},
		{"FIBRIL_USR=a\n", "line 1: unknown variable FIBRIL_USR"},
		{"# c\nFIBRIL PASSWORD=x\n", `line 2: "FIBRIL PASSWORD" is not a variable name`},
		{"FIBRIL_PASSWORD=\"open\n", "line 1: unterminated quote"},
		{"FIBRIL_TLS=maybe\n", `FIBRIL_TLS="maybe" (from env file `},
		{"FIBRIL_TIMEOUT=soon\n", `FIBRIL_TIMEOUT="soon" (from env file `},
	} {
		path := writeFile(t, filepath.Join(dir, "bad.env"), tc.content)
		r := ctlEnv(t, nil, "--env-file", path, "cluster")
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) || !strings.Contains(r.stderr, path) {
			t.Errorf("%q: exit %d, stderr %q (want %q and the path)", tc.content, r.code, r.stderr, tc.want)
		}
	}
	if r := ctlEnv(t, map[string]string{"FIBRIL_INSECURE": "sure"}, "help"); r.code != exitUsage || !strings.Contains(r.stderr, "(from the environment)") {
		t.Errorf("bad FIBRIL_INSECURE: %+v", r)
	}
	if r := ctlEnv(t, nil, "cluster", "--env-file"); r.code != exitUsage || !strings.Contains(r.stderr, "--env-file") {
		t.Errorf("--env-file without a value: %+v", r)
	}
}

// End to end: the admin address and credentials come from the env file,
// a flag overrides one of them, and no password shows in --help.
func TestEnvFileReachesTheAdminAPI(t *testing.T) {
	var gotUser string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, _ := r.BasicAuth()
		gotUser = u
		if p != "s3cret" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		_, _ = w.Write([]byte(`{"connections":[]}`))
	}))
	defer srv.Close()
	home := t.TempDir()
	writeFile(t, filepath.Join(home, ".config", "fibrilctl", "env"),
		"FIBRIL_ADMIN_ADDR="+strings.TrimPrefix(srv.URL, "http://")+"\nFIBRIL_ADMIN_USER=ops\nFIBRIL_ADMIN_PASSWORD=s3cret\n")
	vars := map[string]string{"HOME": home}
	r := ctlEnv(t, vars, "connections")
	if r.code != 0 || gotUser != "ops" || !strings.Contains(r.stdout, "0 connection(s)") {
		t.Fatalf("connections with the env file: %+v (user %q)", r, gotUser)
	}
	if r := ctlEnv(t, vars, "connections", "--admin-user", "flag-user"); r.code != 0 || gotUser != "flag-user" {
		t.Fatalf("flag over the env file: %+v (user %q)", r, gotUser)
	}
	r = ctlEnv(t, vars, "connections", "--help")
	if r.code != 0 || strings.Contains(r.stdout, "s3cret") || !strings.Contains(r.stdout, "--admin-password") && !strings.Contains(r.stdout, "-admin-password") {
		t.Fatalf("connections --help shows the password or no flag:\n%s", r.stdout)
	}
}
