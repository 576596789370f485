// Package systemd holds the systemd unit for the broker (fibril.service,
// README.md); its test keeps the unit true: the directives the README
// promises are there, what it hands the broker is real configuration, and
// systemd's own checker accepts it.
package systemd

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/broker"
	"github.com/fibrilgo/fibril/core/config"
)

const unitFile = "fibril.service"

// directive is one Key=Value line of a unit file.
type directive struct {
	line                int
	section, key, value string
}

// unit is a parsed unit file, its directives in file order.
type unit []directive

// parseUnit reads a unit file's [Section] Key=Value lines: comments
// ('#', ';') and blank lines skipped, a trailing backslash joining a line
// to the next, spaces around the key and the value trimmed. It is the
// subset of systemd's syntax this file uses, not all of it.
func parseUnit(t *testing.T, path string) unit {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var u unit
	section, pending, start := "", "", 0
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if pending == "" && (line == "" || line[0] == '#' || line[0] == ';') {
			continue
		}
		if pending == "" {
			start = n
		}
		if cont, ok := strings.CutSuffix(line, `\`); ok {
			pending += cont + " "
			continue
		}
		line, pending = pending+line, ""
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			section = line[1 : len(line)-1]
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || section == "" {
			t.Fatalf("%s:%d: not a directive in a section: %q", path, start, line)
		}
		u = append(u, directive{line: start, section: section, key: strings.TrimSpace(k), value: strings.TrimSpace(v)})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if pending != "" {
		t.Fatalf("%s: ends in a continued line", path)
	}
	return u
}

// get returns the value of a directive's last assignment, which is the one
// systemd keeps for single-valued settings.
func (u unit) get(section, key string) (string, bool) {
	v, found := "", false
	for _, d := range u {
		if d.section == section && d.key == key {
			v, found = d.value, true
		}
	}
	return v, found
}

// all returns every value assigned to a directive, in order.
func (u unit) all(section, key string) []string {
	var out []string
	for _, d := range u {
		if d.section == section && d.key == key {
			out = append(out, d.value)
		}
	}
	return out
}

// The unit declares what the README promises: readiness by notification,
// the hardening set, the limits and the restart policy.
func TestUnitDirectives(t *testing.T) {
	u := parseUnit(t, unitFile)
	want := []struct{ section, key, value string }{
		{"Service", "Type", "notify"},
		{"Service", "NotifyAccess", "main"},
		{"Service", "User", "fibril"},
		{"Service", "Group", "fibril"},
		{"Service", "StateDirectory", "fibril"},
		{"Service", "ConfigurationDirectory", "fibril"},
		{"Service", "ProtectSystem", "strict"},
		{"Service", "ProtectHome", "yes"},
		{"Service", "PrivateTmp", "yes"},
		{"Service", "NoNewPrivileges", "yes"},
		{"Service", "CapabilityBoundingSet", ""}, // empty: no capability
		{"Service", "RestrictAddressFamilies", "AF_UNIX AF_INET AF_INET6"},
		{"Service", "LimitNOFILE", "65536"},
		{"Service", "Restart", "on-failure"},
		{"Service", "RestartSec", "2s"},
		{"Service", "KillSignal", "SIGTERM"},
		{"Service", "KillMode", "mixed"},
		{"Unit", "StartLimitIntervalSec", "2min"},
		{"Unit", "StartLimitBurst", "5"},
		{"Install", "WantedBy", "multi-user.target"},
	}
	// Go exits with status 2 on a panic as well as on a bad
	// configuration: excluding 2 from restarts would leave a crashed
	// broker down.
	if v, ok := u.get("Service", "RestartPreventExitStatus"); ok && strings.Contains(" "+v+" ", " 2 ") {
		t.Error("RestartPreventExitStatus includes 2, the exit status of a Go panic")
	}
	for _, w := range want {
		got, ok := u.get(w.section, w.key)
		if !ok {
			t.Errorf("[%s] %s= is missing (want %q)", w.section, w.key, w.value)
		} else if got != w.value {
			t.Errorf("[%s] %s=%s, want %q", w.section, w.key, got, w.value)
		}
	}

	exec := strings.Fields(u.execStart(t))
	if exec[0] != "/usr/local/bin/fibril" {
		t.Errorf("ExecStart runs %s, not the binary the README installs", exec[0])
	}

	// SIGKILL must not cut the graceful shutdown short: the sessions'
	// part alone may take broker.ShutdownTimeout, then leaving the
	// cluster and flushing the logs follow.
	stop, ok := u.get("Service", "TimeoutStopSec")
	if !ok {
		t.Fatal("TimeoutStopSec= is missing: systemd's default (90 s, or DefaultTimeoutStopSec) would be implicit")
	}
	d, err := parseSpan(stop)
	if err != nil {
		t.Fatalf("TimeoutStopSec=%s: %v", stop, err)
	}
	if min := broker.ShutdownTimeout + 20*time.Second; d < min {
		t.Errorf("TimeoutStopSec=%s is shorter than the broker's shutdown needs (%v)", stop, min)
	}
	if start, ok := u.get("Service", "TimeoutStartSec"); ok {
		if _, err := parseSpan(start); err != nil {
			t.Errorf("TimeoutStartSec=%s: %v", start, err)
		}
	}
}

// execStart is the unit's one ExecStart= command line.
func (u unit) execStart(t *testing.T) string {
	t.Helper()
	execs := u.all("Service", "ExecStart")
	if len(execs) != 1 || strings.TrimSpace(execs[0]) == "" {
		t.Fatalf("ExecStart: %q, want one command", execs)
	}
	return execs[0]
}

// parseSpan reads the systemd time spans this unit uses ("2s", "60s",
// "10min", "1min 30s", a bare number of seconds, "infinity").
func parseSpan(s string) (time.Duration, error) {
	if s == "infinity" {
		return time.Duration(1<<63 - 1), nil
	}
	if n, err := strconv.Atoi(s); err == nil {
		return time.Duration(n) * time.Second, nil
	}
	r := strings.NewReplacer(" ", "", "min", "m", "sec", "s", "hr", "h", "msec", "ms")
	return time.ParseDuration(r.Replace(s))
}

// envAssignments splits the value of Environment= lines into NAME=value
// words, with systemd's double and single quotes.
func envAssignments(t *testing.T, line string) []string {
	t.Helper()
	var out []string
	var cur strings.Builder
	var quote rune
	inWord := false
	for _, r := range line {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '"' || r == '\'':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		t.Fatalf("Environment=%s: unbalanced quote", line)
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out
}

// envNames is every variable the configuration reads.
func envNames() map[string]*config.Key {
	names := map[string]*config.Key{}
	for _, k := range config.Keys() {
		for _, e := range k.Env {
			names[e] = k
		}
	}
	return names
}

// What the unit hands the broker (FIBRIL_* variables, ExecStart flags)
// is valid configuration made of real keys, and, applied over the example
// file the README installs, puts the data in the unit's state directory.
func TestUnitConfiguration(t *testing.T) {
	u := parseUnit(t, unitFile)
	known := envNames()
	var env []string
	for _, line := range u.all("Service", "Environment") {
		for _, kv := range envAssignments(t, line) {
			name, _, ok := strings.Cut(kv, "=")
			if !ok {
				t.Errorf("Environment=%s: %q is not NAME=value", line, kv)
				continue
			}
			if !strings.HasPrefix(name, "FIBRIL_") {
				continue
			}
			if known[name] == nil && name != config.EnvConfig {
				t.Errorf("Environment: %s is not a configuration variable", name)
			}
			env = append(env, kv)
		}
	}

	// The command line, with the installed config file swapped for a
	// copy of the example the README tells to install there.
	confDir, _ := u.get("Service", "ConfigurationDirectory")
	example, err := os.ReadFile(filepath.Join("..", "..", "fibril.example.toml"))
	if err != nil {
		t.Fatal(err)
	}
	localConfig := filepath.Join(t.TempDir(), "fibril.toml")
	if err := os.WriteFile(localConfig, example, 0o600); err != nil {
		t.Fatal(err)
	}
	args := strings.Fields(u.execStart(t))[1:]
	sawConfig := false
	for i := 0; i < len(args); i++ {
		name, value, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if !strings.HasPrefix(args[i], "-") {
			t.Errorf("ExecStart: positional argument %q (fibril takes none)", args[i])
			continue
		}
		if name != config.FlagConfig {
			if config.Lookup(name) == nil && !isFlagTwin(name) {
				t.Errorf("ExecStart: --%s is not a configuration flag", name)
			}
			continue
		}
		sawConfig = true
		if !hasValue && i+1 < len(args) {
			i++
			value = args[i]
			args[i] = localConfig
		} else {
			args[i] = "--" + config.FlagConfig + "=" + localConfig
		}
		if want := "/etc/" + confDir + "/fibril.toml"; value != want {
			t.Errorf("ExecStart: --config %s, want %s (ConfigurationDirectory=%s)", value, want, confDir)
		}
	}
	if !sawConfig {
		t.Error("ExecStart: no --config; the README installs /etc/fibril/fibril.toml")
	}

	cfg, ld, err := config.Load(args, env)
	if err != nil {
		t.Fatalf("the unit's configuration does not load: %v", err)
	}
	for _, w := range ld.Warnings {
		t.Errorf("config warning: %s", w)
	}
	// Each variable is the one that set its key: a real name, not
	// overridden by a flag or a twin.
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if k := known[name]; k != nil {
			if o := ld.Source(k.Name); o.Layer != config.LayerEnv || o.Name != name {
				t.Errorf("%s: %s comes from %v, not from the variable", name, k.Name, o)
			}
		}
	}
	stateDir, _ := u.get("Service", "StateDirectory")
	if want := "/var/lib/" + stateDir; cfg.Server.DataDir != want {
		t.Errorf("server.data_dir %q, want the state directory %s (ProtectSystem=strict leaves nothing else writable)", cfg.Server.DataDir, want)
	}
	if wd, ok := u.get("Service", "WorkingDirectory"); ok && wd != cfg.Server.DataDir {
		t.Errorf("WorkingDirectory=%s, but the data directory is %s", wd, cfg.Server.DataDir)
	}
}

func isFlagTwin(name string) bool {
	for _, k := range config.Keys() {
		for _, f := range k.Flags {
			if f == name {
				return true
			}
		}
	}
	return false
}

var envMention = regexp.MustCompile(`\bFIBRIL_[A-Z0-9_]+\b`)

// Every FIBRIL_* variable the README and the unit's comments name exists
// (the README's drop-in sets one).
func TestDocumentedVariablesExist(t *testing.T) {
	known := envNames()
	for _, f := range []string{"README.md", unitFile} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range envMention.FindAllString(string(b), -1) {
			if known[name] == nil && name != config.EnvConfig {
				t.Errorf("%s names %s, which is not a configuration variable", f, name)
			}
		}
	}
}

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// fibrilBinary builds cmd/fibril once into a temporary directory.
func fibrilBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds cmd/fibril; skipped with -short")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to build cmd/fibril")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "fibril-systemd-test")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "fibril")
		out, err := exec.Command("go", "build", "-o", binary, "github.com/fibrilgo/fibril/cmd/fibril").CombinedOutput()
		if err != nil {
			buildErr = errors.New("go build ./cmd/fibril: " + err.Error() + "\n" + string(out))
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binary != "" {
		os.RemoveAll(filepath.Dir(binary))
	}
	os.Exit(code)
}

// systemd-analyze verify accepts the unit, where systemd is installed. It
// insists that ExecStart's binary exists, so it checks a copy that runs a
// freshly built one; anything it says about the unit is a failure.
func TestSystemdAnalyze(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("systemd-analyze is not installed here; TestUnitDirectives checks the file without it")
	}
	bin := fibrilBinary(t)
	src, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(src), "ExecStart=/usr/local/bin/fibril ", "ExecStart="+bin+" ", 1)
	if text == string(src) {
		t.Fatal("no ExecStart=/usr/local/bin/fibril line to point at the test binary")
	}
	copyPath := filepath.Join(t.TempDir(), unitFile)
	if err := os.WriteFile(copyPath, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}

	out, err := exec.Command("systemd-analyze", "verify", "--man=no", copyPath).CombinedOutput()
	t.Logf("systemd-analyze verify: err %v, output:\n%s", err, out)
	if err != nil {
		t.Errorf("systemd-analyze verify failed: %v\n%s", err, out)
	}
	// verify exits 0 on unknown keys and unparsable values, which it only
	// reports, prefixed with the file and line: any word about our unit
	// is a failure; other lines (the host's own units) are not ours.
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.Contains(line, unitFile) {
			t.Errorf("systemd-analyze verify: %s", line)
		}
	}

	// The exposure score, offline (systemd 250 and later); a rise above
	// 3.0 (systemd's "OK" band) means hardening was lost.
	help, _ := exec.Command("systemd-analyze", "--help").CombinedOutput()
	if !strings.Contains(string(help), "--offline") || !strings.Contains(string(help), "--threshold") {
		t.Log("this systemd-analyze has no offline security check")
		return
	}
	out, err = exec.Command("systemd-analyze", "security", "--offline=yes", "--threshold=30", "--no-pager", copyPath).CombinedOutput()
	overall := ""
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "Overall exposure level") {
			overall = strings.TrimSpace(line)
		}
	}
	if err != nil {
		t.Errorf("systemd-analyze security: %v (%s)\n%s", err, overall, out)
	} else {
		t.Log(overall)
	}
}
