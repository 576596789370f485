package main

import (
	"strings"
	"testing"
)

// tls reload reaches the admin API and reports its refusal (the test
// broker runs without TLS); without a subcommand it is a usage error.
func TestTLSReload(t *testing.T) {
	if r := ctl(t, "", "tls", "reload"); r.code != exitFail || !strings.Contains(r.stderr, "TLS is off") {
		t.Fatalf("tls reload without TLS: %+v", r)
	}
	if r := ctl(t, "", "tls"); r.code != exitUsage {
		t.Fatalf("tls without a subcommand: %+v", r)
	}
}
