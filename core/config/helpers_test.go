package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeConfig writes a TOML file named fibril.toml in a fresh temp dir.
func writeConfig(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fibril.toml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// mustLoad loads and fails the test on any error.
func mustLoad(t *testing.T, args []string, environ ...string) (*Config, *Loaded) {
	t.Helper()
	cfg, ld, err := Load(args, environ)
	if err != nil {
		t.Fatalf("Load(%q, %q): %v", args, environ, err)
	}
	return cfg, ld
}

// mustFail loads, expects an error and returns its problems.
func mustFail(t *testing.T, args []string, environ ...string) []*Error {
	t.Helper()
	_, _, err := Load(args, environ)
	if err == nil {
		t.Fatalf("Load(%q, %q) succeeded, want an error", args, environ)
	}
	ps := Problems(err)
	if len(ps) == 0 {
		t.Fatalf("Load returned a non-config error: %v", err)
	}
	return ps
}

// findProblem returns the problem whose text contains every fragment.
func findProblem(t *testing.T, ps []*Error, fragments ...string) *Error {
	t.Helper()
	for _, p := range ps {
		text := p.Error()
		ok := true
		for _, f := range fragments {
			if !strings.Contains(text, f) {
				ok = false
				break
			}
		}
		if ok {
			return p
		}
	}
	var all []string
	for _, p := range ps {
		all = append(all, "  "+p.Error())
	}
	t.Fatalf("no problem contains %q; got:\n%s", fragments, strings.Join(all, "\n"))
	return nil
}

// wantOnly fails unless there is exactly one problem containing the fragments.
func wantOnly(t *testing.T, ps []*Error, fragments ...string) *Error {
	t.Helper()
	p := findProblem(t, ps, fragments...)
	if len(ps) != 1 {
		var all []string
		for _, p := range ps {
			all = append(all, "  "+p.Error())
		}
		t.Fatalf("want exactly one problem, got %d:\n%s", len(ps), strings.Join(all, "\n"))
	}
	return p
}

// warningFor returns the warning about subject, or fails.
func warningFor(t *testing.T, ld *Loaded, subject string) Warning {
	t.Helper()
	for _, w := range ld.Warnings {
		if strings.HasPrefix(w.Subject, subject) {
			return w
		}
	}
	t.Fatalf("no warning about %s; got %v", subject, ld.Warnings)
	return Warning{}
}

// samplePHC is a syntactically valid argon2id hash (not of a real password).
const samplePHC = "$argon2id$v=19$m=65536,t=3,p=4$c2FsdHNhbHRzYWx0$aGFzaGhhc2hoYXNoaGFzaGhhc2hoYXNoaGFzaA"
