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
	withPeer := func(c config.Config, bind string) config.Config {
		c.Broker.PeerListener.Bind = bind
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
		{"default login exposed", cfg("0.0.0.0:9876", false, true), empty,
			[]string{WarnDefaultLoginExposed("broker.listener.bind (0.0.0.0:9876)")}},
		{"default login off", cfg("0.0.0.0:9876", true, false), empty, nil},
		{"users without TLS", cfg("0.0.0.0:9876", false, false), withUser, []string{WarnPlaintextPasswords}},
		{"both", cfg(":9876", false, true), withUser,
			[]string{WarnPlaintextPasswords, WarnDefaultLoginExposed("broker.listener.bind (:9876)")}},
		{"real fibril disables default", cfg(":9876", true, true), withFibril, nil},
		// Every listener counts, not only the client one.
		{"peer listener exposed", withPeer(cfg("127.0.0.1:9876", false, true), "0.0.0.0:7000"), empty,
			[]string{WarnDefaultLoginExposed("broker.peer_listener.bind (0.0.0.0:7000)")}},
		{"both listeners exposed", withPeer(cfg(":9876", false, true), ":7000"), empty,
			[]string{WarnDefaultLoginExposed("broker.listener.bind (:9876)", "broker.peer_listener.bind (:7000)")}},
		{"loopback peer listener", withPeer(cfg("127.0.0.1:9876", false, true), "[::1]:7000"), empty, nil},
	}
	for _, c := range cases {
		if got := StartupWarnings(c.cfg, c.store); !slices.Equal(got, c.want) {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
}
