package main

import (
	"strings"
	"testing"
)

// log-level reads and changes the running broker's level; a level that
// does not exist is refused with the list.
func TestLogLevel(t *testing.T) {
	r := ctl(t, "", "log-level")
	mustOK(t, r, "log-level")
	if !strings.Contains(r.stdout, "logs at info") {
		t.Fatalf("log-level printed %q", r.stdout)
	}
	r = ctl(t, "", "log-level", "debug")
	mustOK(t, r, "log-level debug")
	if !strings.Contains(r.stdout, "logs at debug now (was info)") {
		t.Fatalf("log-level debug printed %q", r.stdout)
	}
	defer func() { mustOK(t, ctl(t, "", "log-level", "info"), "log-level info") }()
	if r := ctl(t, "", "log-level", "--json"); r.code != 0 || !strings.Contains(r.stdout, `"level": "debug"`) {
		t.Fatalf("log-level --json: %+v", r)
	}
	if r := ctl(t, "", "log-level", "loud"); r.code != exitFail || !strings.Contains(r.stderr, "debug, info, warn, error") {
		t.Fatalf("log-level loud: %+v", r)
	}
}
