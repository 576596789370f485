package config

import (
	"strings"
	"testing"
)

// Each cross-key rule: one failing case that must name every key involved
// with its origin, and one passing case.

func TestRuleDataDir(t *testing.T) {
	wantOnly(t, mustFail(t, []string{"--server.data_dir= "}), "flag --server.data_dir", "must not be empty")
}

func TestRuleAdminAuth(t *testing.T) {
	p := wantOnly(t, mustFail(t, []string{"--admin.auth.enabled"}),
		"admin.auth.enabled needs a password", "admin.auth.enabled = true (flag --admin.auth.enabled)",
		"admin.auth.password", "admin.auth.password_file")
	if len(p.Keys) != 3 {
		t.Errorf("keys %v", p.Keys)
	}
	wantOnly(t, mustFail(t, []string{"--admin.auth.enabled", "--admin.auth.username="}, "FIBRIL_ADMIN_AUTH_PASSWORD=pw"),
		"needs admin.auth.username", `admin.auth.username = "" (flag --admin.auth.username)`)
	p = wantOnly(t, mustFail(t, []string{"--admin.auth.enabled", "--admin.auth.password_file=/p"}, "FIBRIL_ADMIN_AUTH_PASSWORD=s3cret"),
		"one way only", "admin.auth.password = <redacted> (env FIBRIL_ADMIN_AUTH_PASSWORD)", "flag --admin.auth.password_file")
	if strings.Contains(p.Error(), "s3cret") {
		t.Errorf("secret shown: %v", p)
	}
	mustLoad(t, []string{"--admin.auth.enabled", "--admin.auth.password_file=/p"})
	mustLoad(t, []string{"--admin.auth.enabled"}, "FIBRIL_ADMIN_AUTH_PASSWORD=pw")
	// Disabled auth checks nothing.
	mustLoad(t, []string{"--admin.auth.username="})
}

func TestRuleTLSSource(t *testing.T) {
	wantOnly(t, mustFail(t, []string{"--tls.enabled"}),
		"needs a certificate source", "tls.enabled = true (flag --tls.enabled)", "tls.cert_path", "tls.key_path", "tls.auto_self_signed")
	wantOnly(t, mustFail(t, []string{"--tls.enabled", "--tls.cert_path=/c", "--tls.key_path=/k", "--tls.auto_self_signed"}),
		"exactly one certificate source", "tls.cert_path", "tls.key_path", "tls.auto_self_signed")
	wantOnly(t, mustFail(t, []string{"--tls.enabled", "--tls.cert_path=/c"}),
		"must be set together", `tls.cert_path = "/c" (flag --tls.cert_path)`, `tls.key_path = "" (default)`)
	wantOnly(t, mustFail(t, nil, "FIBRIL_TLS_KEY_PATH=/k"), "must be set together")
	mustLoad(t, []string{"--tls.enabled", "--tls.cert_path=/c", "--tls.key_path=/k"})
	mustLoad(t, []string{"--tls.enabled", "--tls.auto_self_signed"})
	_, ld := mustLoad(t, []string{"--tls.auto_self_signed"})
	warningFor(t, ld, "tls.enabled")
}

func TestRuleTLSDependents(t *testing.T) {
	for _, k := range []string{"tls.admin_enabled", "tls.inter_broker"} {
		wantOnly(t, mustFail(t, nil, Lookup(k).Env[0]+"=true"),
			k+" = true needs tls.enabled", k+" = true (env "+Lookup(k).Env[0]+")", "tls.enabled = false (default)")
	}
	wantOnly(t, mustFail(t, []string{"--tls.client_auth=require"}), "tls.client_auth needs tls.enabled")
	// Unset follows tls.enabled; an explicit false stays false.
	cfg, ld := mustLoad(t, []string{"--tls.enabled", "--tls.auto_self_signed", "--tls.inter_broker=false"})
	if !cfg.TLS.AdminEnabled || cfg.TLS.InterBroker {
		t.Errorf("admin %v inter %v", cfg.TLS.AdminEnabled, cfg.TLS.InterBroker)
	}
	if got := ld.Source("tls.admin_enabled").String(); got != "default (follows tls.enabled)" {
		t.Errorf("origin %q", got)
	}
	mustLoad(t, []string{"--tls.admin_enabled=false", "--tls.inter_broker=false"})
}

func TestRuleLiveness(t *testing.T) {
	wantOnly(t, mustFail(t, nil, "FIBRIL_COORDINATION_HEARTBEAT_INTERVAL_MS=2001"),
		"at least twice", "coordination.liveness_ttl_ms = 4000 (default)",
		"coordination.heartbeat_interval_ms = 2001 (env FIBRIL_COORDINATION_HEARTBEAT_INTERVAL_MS)")
	mustLoad(t, nil, "FIBRIL_COORDINATION_HEARTBEAT_INTERVAL_MS=2000")
	wantOnly(t, mustFail(t, []string{"--coordination.heartbeat_interval_ms=0"}), "below the minimum 1")
}

func TestRuleMessageBelowFrame(t *testing.T) {
	path := writeConfig(t, "[broker]\nmax_message_bytes = 67108864\n")
	wantOnly(t, mustFail(t, []string{"--config", path}),
		"must be below broker.max_frame_bytes", "broker.max_message_bytes = 67108864 ("+path+":2)",
		"broker.max_frame_bytes = 67108864 (default)")
	mustLoad(t, []string{"--config", path, "--broker.max_frame_bytes=67108865"})
}

func TestRulePrivateNeedsCoordination(t *testing.T) {
	wantOnly(t, mustFail(t, nil, "FIBRIL_BROKER_VISIBILITY=private"),
		"cannot run standalone", `broker.visibility = "private" (env FIBRIL_BROKER_VISIBILITY)`, `coordination.backend = "none" (default)`)
	_, ld := mustLoad(t, []string{"--broker.listener.advertise=gw.example.com:1"}, "FIBRIL_BROKER_VISIBILITY=private", "FIBRIL_COORDINATION_BACKEND=raft")
	warningFor(t, ld, "broker.listener.advertise")
}

func TestRulePartitionsAndPolls(t *testing.T) {
	for _, k := range []string{"runtime_seed.partitioning.default_partition_count", "storage.fsync_interval_ms",
		"runtime_seed.delivery.expiry_batch_max", "runtime_seed.delivery.delivery_poll_max_ms", "runtime_seed.delivery.expiry_poll_min_ms"} {
		wantOnly(t, mustFail(t, []string{"--" + k + "=0"}), k, "below the minimum 1")
	}
	wantOnly(t, mustFail(t, []string{"--storage.segment_max_bytes=4095"}), "below the minimum 4096")
}

func TestRuleWarnings(t *testing.T) {
	_, ld := mustLoad(t, nil, "FIBRIL_CLUSTER_SECRET=s", "FIBRIL_CLUSTER_SECRET_PATH=/p")
	if w := warningFor(t, ld, "coordination.secret_path"); !strings.Contains(w.Msg, "FIBRIL_CLUSTER_SECRET") {
		t.Errorf("warning %v", w)
	}
	_, ld = mustLoad(t, []string{"--coordination.raft.bootstrap_expect=3"})
	warningFor(t, ld, "coordination.raft.bootstrap_expect (flag")
}
