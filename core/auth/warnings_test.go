package auth

import (
	"slices"
	"testing"

	"github.com/fibrilgo/fibril/core/config"
)

func TestStartupWarnings(t *testing.T) {
	cfg := func(bind string, tls, allow bool) config.Config {
		var c config.Config
		c.Broker.Listener.Bind = bind
		c.TLS.Enabled = tls
		c.Auth.AllowDefaultLoopback = allow
		return c
	}
	empty, _ := openTemp(t)
	withUser, _ := openTemp(t)
	_ = withUser.Add("alice", "pw")
	withFibril, _ := openTemp(t)
	_ = withFibril.Add(DefaultUser, "pw")

	cases := []struct {
		name  string
		cfg   config.Config
		store *Store
		want  []string
	}{
		{"quiet local dev", cfg("127.0.0.1:9876", false, true), empty, nil},
		{"default login exposed", cfg("0.0.0.0:9876", false, true), empty, []string{WarnDefaultLoginExposed}},
		{"default login off", cfg("0.0.0.0:9876", true, false), empty, nil},
		{"users without TLS", cfg("0.0.0.0:9876", false, false), withUser, []string{WarnPlaintextPasswords}},
		{"both", cfg(":9876", false, true), withUser, []string{WarnPlaintextPasswords, WarnDefaultLoginExposed}},
		{"real fibril disables default", cfg(":9876", true, true), withFibril, nil},
	}
	for _, c := range cases {
		if got := StartupWarnings(c.cfg, c.store); !slices.Equal(got, c.want) {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
}
