package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/testkit"
)

// fibril auth hash-password prints a PHC string that auth.seed_users
// takes: the seeded user logs in with the password and not without.
func TestAuthHashPassword(t *testing.T) {
	old := stdin
	defer func() { stdin = old }()
	stdin = strings.NewReader("correct horse battery\n")
	code, out, errOut := runCLI(t, []string{"auth", "hash-password"})
	hash := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(hash, "$argon2id$") || strings.Contains(out, "correct horse") {
		t.Fatalf("hash-password: exit %d, %q %q", code, out, errOut)
	}
	stdin = strings.NewReader("\n")
	if code, _, _ := runCLI(t, []string{"auth", "hash-password"}); code != exitUsage {
		t.Fatalf("an empty password: exit %d", code)
	}
	if code, _, _ := runCLI(t, []string{"auth"}); code != exitUsage {
		t.Fatalf("no subcommand: exit %d", code)
	}

	conf := filepath.Join(t.TempDir(), "fibril.toml")
	if err := os.WriteFile(conf, fmt.Appendf(nil, "[[auth.seed_users]]\nusername = \"app\"\npassword_hash = %q\n", hash), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var logs syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--config", conf, "--server.data_dir=" + t.TempDir(), "--broker.listener.bind=127.0.0.1:0",
			"--admin.listener.bind=127.0.0.1:0"}, nil, &logs, &logs)
	}()
	defer func() { cancel(); <-done }()
	addrRE := regexp.MustCompile(`msg="broker ready".* broker=(\S+)`)
	testkit.EventuallyReport(t, 10*time.Second, func() bool { return addrRE.MatchString(logs.String()) },
		func() string { return "no \"broker ready\" line:\n" + logs.String() })
	addr := addrRE.FindStringSubmatch(logs.String())[1]
	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer dcancel()
	for _, c := range []struct {
		pw string
		ok bool
	}{{"correct horse battery", true}, {"wrong", false}} {
		cl, err := client.Dial(dctx, client.Options{Addrs: []string{addr}, Username: "app", Password: c.pw})
		if (err == nil) != c.ok {
			t.Fatalf("login with %q: %v", c.pw, err)
		}
		if cl != nil {
			cl.Close()
		}
	}
}
