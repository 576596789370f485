package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/testkit"
)

// fibril health reads the broker's configuration, asks its admin listener
// and exits 0 on 200: /healthz by default, /readyz with --ready; nothing
// listening is exit 1; over HTTPS when the admin listener serves it.
func TestHealth(t *testing.T) {
	for _, tlsOn := range []bool{false, true} {
		t.Run(fmt.Sprintf("tls=%v", tlsOn), func(t *testing.T) {
			port := testkit.FreePort(t)
			flags := []string{"--server.data_dir=" + t.TempDir(), "--broker.listener.bind=127.0.0.1:0",
				fmt.Sprintf("--admin.listener.bind=127.0.0.1:%d", port)}
			if tlsOn {
				flags = append(flags, "--tls.enabled=true", "--tls.auto_self_signed=true")
			}
			ctx, cancel := context.WithCancel(context.Background())
			var out, errOut syncBuffer
			done := make(chan int, 1)
			go func() { done <- run(ctx, flags, nil, &out, &errOut) }()
			defer func() { cancel(); <-done }()
			testkit.EventuallyReport(t, 10*time.Second, func() bool { return strings.Contains(errOut.String(), "broker ready") },
				func() string { return "no \"broker ready\" log line:\n" + errOut.String() })

			scheme := "http"
			if tlsOn {
				scheme = "https"
			}
			code, stdout, stderr := runCLI(t, append([]string{"health"}, flags...))
			if code != 0 || !strings.Contains(stdout, fmt.Sprintf("%s://127.0.0.1:%d/healthz: 200 ok", scheme, port)) {
				t.Fatalf("health: exit %d, %q %q", code, stdout, stderr)
			}
			if code, stdout, stderr := runCLI(t, append([]string{"health", "--ready"}, flags...)); code != 0 || !strings.Contains(stdout, "/readyz: 200") {
				t.Fatalf("health --ready: exit %d, %q %q", code, stdout, stderr)
			}
		})
	}
	free := testkit.FreePort(t)
	code, _, stderr := runCLI(t, []string{"health", fmt.Sprintf("--admin.listener.bind=127.0.0.1:%d", free)})
	if code != exitError || !strings.Contains(stderr, "fibril health") {
		t.Fatalf("health with nothing listening: exit %d, %q", code, stderr)
	}
	if code, _, _ := runCLI(t, []string{"health", "--admin.listener.bind=nope"}); code != exitUsage {
		t.Fatalf("health with a bad bind: exit %d", code)
	}
}

func TestProbeURL(t *testing.T) {
	for _, c := range []struct {
		bind  string
		https bool
		want  string
	}{
		{"0.0.0.0:8081", false, "http://127.0.0.1:8081/healthz"},
		{":8081", false, "http://127.0.0.1:8081/healthz"},
		{"[::]:8081", true, "https://[::1]:8081/healthz"},
		{"10.1.2.3:8081", false, "http://10.1.2.3:8081/healthz"},
	} {
		if got, err := probeURL(c.bind, c.https, "/healthz"); err != nil || got != c.want {
			t.Errorf("probeURL(%q) = %q, %v; want %q", c.bind, got, err, c.want)
		}
	}
}
