package config

import (
	"fmt"
	"reflect"
	"strings"
)

// Cross-key rules (S-172 and this project's own, such as a private broker
// needing coordination). Single-key rules (types, bounds, enums, address
// syntax) live in the key table and run per layer; these run once on the
// merged values. Like the key table, the rule list feeds the generated
// docs, so the reference cannot forget a rule.

// rule is one cross-key check.
type rule struct {
	// Doc states the rule for the docs.
	Doc string
	// Warn marks rules that only warn.
	Warn  bool
	check func(c *checker)
}

var rules = []rule{
	{
		Doc: "Admin auth needs a username and exactly one password source: FIBRIL_ADMIN_AUTH_PASSWORD or admin.auth.password_file.",
		check: func(c *checker) {
			if !c.bool("admin.auth.enabled") {
				return
			}
			if strings.TrimSpace(c.str("admin.auth.username")) == "" {
				c.fail("admin.auth.enabled needs admin.auth.username", "admin.auth.enabled", "admin.auth.username")
			}
			pw, file := c.str("admin.auth.password") != "", c.str("admin.auth.password_file") != ""
			switch {
			case !pw && !file:
				c.fail("admin.auth.enabled needs a password: set env FIBRIL_ADMIN_AUTH_PASSWORD or admin.auth.password_file",
					"admin.auth.enabled", "admin.auth.password", "admin.auth.password_file")
			case pw && file:
				c.fail("set the admin password one way only: env FIBRIL_ADMIN_AUTH_PASSWORD or admin.auth.password_file",
					"admin.auth.password", "admin.auth.password_file")
			}
		},
	},
	{
		Doc: "tls.cert_path and tls.key_path are set together; TLS needs exactly one certificate source: that pair or tls.auto_self_signed. (Warns when a source is set while TLS is off.)",
		check: func(c *checker) {
			cert, key := c.str("tls.cert_path") != "", c.str("tls.key_path") != ""
			auto := c.bool("tls.auto_self_signed")
			if cert != key {
				c.fail("tls.cert_path and tls.key_path must be set together", "tls.cert_path", "tls.key_path")
			}
			pair := cert && key
			switch {
			case !c.bool("tls.enabled"):
				if pair || auto {
					c.warn("tls.enabled", "TLS is off, so tls.cert_path/tls.key_path/tls.auto_self_signed have no effect")
				}
			case !pair && !auto && cert == key:
				c.fail("tls.enabled needs a certificate source: tls.cert_path + tls.key_path, or tls.auto_self_signed = true",
					"tls.enabled", "tls.cert_path", "tls.key_path", "tls.auto_self_signed")
			case pair && auto:
				c.fail("TLS needs exactly one certificate source: either tls.cert_path + tls.key_path or tls.auto_self_signed, not both",
					"tls.cert_path", "tls.key_path", "tls.auto_self_signed")
			}
		},
	},
	{
		Doc: "tls.admin_enabled = true, tls.inter_broker = true and tls.client_auth other than off each need tls.enabled (they use its certificate).",
		check: func(c *checker) {
			if c.bool("tls.enabled") {
				return
			}
			for _, k := range []string{"tls.admin_enabled", "tls.inter_broker"} {
				if c.bool(k) {
					c.fail(k+" = true needs tls.enabled = true (it uses the broker's certificate)", k, "tls.enabled")
				}
			}
			if c.str("tls.client_auth") != ClientAuthOff {
				c.fail("tls.client_auth needs tls.enabled = true (client certificates only exist over TLS)", "tls.client_auth", "tls.enabled")
			}
		},
	},
	{
		Doc: "coordination.liveness_ttl_ms ≥ 2 × coordination.heartbeat_interval_ms, so one lost heartbeat does not kill a node.",
		check: func(c *checker) {
			ttl, hb := c.int("coordination.liveness_ttl_ms"), c.int("coordination.heartbeat_interval_ms")
			if ttl < 2*hb {
				c.fail(fmt.Sprintf("coordination.liveness_ttl_ms must be at least twice coordination.heartbeat_interval_ms (%d)", 2*hb),
					"coordination.liveness_ttl_ms", "coordination.heartbeat_interval_ms")
			}
		},
	},
	{
		Doc: "coordination.consul.cert_path and coordination.consul.key_path are set together.",
		check: func(c *checker) {
			if (c.str("coordination.consul.cert_path") == "") != (c.str("coordination.consul.key_path") == "") {
				c.fail("coordination.consul.cert_path and coordination.consul.key_path must be set together",
					"coordination.consul.cert_path", "coordination.consul.key_path")
			}
		},
	},
	{
		Doc: "broker.max_message_bytes < broker.max_frame_bytes, leaving room for the frame header and message metadata.",
		check: func(c *checker) {
			if c.int("broker.max_message_bytes") >= c.int("broker.max_frame_bytes") {
				c.fail("broker.max_message_bytes must be below broker.max_frame_bytes (a frame also carries headers)",
					"broker.max_message_bytes", "broker.max_frame_bytes")
			}
		},
	},
	{
		Doc: "A private broker cannot run standalone: broker.visibility = private needs a coordination.backend other than none. (Warns when a private broker sets broker.listener.advertise: clients get those addresses only while routing.expose_private_endpoints is on.)",
		check: func(c *checker) {
			if c.str("broker.visibility") != VisibilityPrivate {
				return
			}
			if c.str("coordination.backend") == BackendNone {
				c.fail("a private broker cannot run standalone (nothing could forward to it): set coordination.backend, or make the broker public",
					"broker.visibility", "coordination.backend")
			}
			if len(c.list("broker.listener.advertise")) > 0 {
				c.warn("broker.listener.advertise", "this broker is private, so these addresses are given to clients only while the runtime setting routing.expose_private_endpoints is on (tagged private, after the gateway's)")
			}
		},
	},
	{
		Doc: "FIBRIL_AUTH_USERNAME and FIBRIL_AUTH_PASSWORD are set together, and that user is not also in auth.seed_users.",
		check: func(c *checker) {
			name, pw := c.str("auth.env_user.username"), c.str("auth.env_user.password")
			if (name == "") != (pw == "") {
				c.fail("FIBRIL_AUTH_USERNAME and FIBRIL_AUTH_PASSWORD must be set together", "auth.env_user.username", "auth.env_user.password")
				return
			}
			users, _ := c.vals["auth.seed_users"].([]SeedUser)
			for _, u := range users {
				if name != "" && u.Username == name {
					c.fail(fmt.Sprintf("user %q is seeded twice: by FIBRIL_AUTH_USERNAME and in auth.seed_users", name),
						"auth.env_user.username", "auth.seed_users")
				}
			}
		},
	},
	{
		Doc:  "coordination.raft.* are used only in a cluster (a warning in standalone mode); an external raft plugin reads them too.",
		Warn: true,
		check: func(c *checker) {
			if c.str("coordination.backend") != "none" {
				return
			}
			for _, k := range []string{"coordination.raft.listen", "coordination.raft.advertise", "coordination.raft.peers", "coordination.raft.bootstrap_expect", "coordination.raft.voter"} {
				if c.changed(k) {
					c.warn(k, "has no effect: coordination.backend is none (standalone)")
				}
			}
		},
	},
	{
		Doc:  "FIBRIL_CLUSTER_SECRET wins over coordination.secret_path (the value beats the file, as for every secret); setting both warns.",
		Warn: true,
		check: func(c *checker) {
			if c.str("coordination.secret") != "" && c.str("coordination.secret_path") != "" {
				c.warn("coordination.secret_path", "ignored: FIBRIL_CLUSTER_SECRET is set and takes precedence; unset one of them")
			}
		},
	},
}

// checker gives rules typed access to merged values and collects results.
type checker struct {
	vals  map[string]any
	ld    *Loaded
	errs  []error
	warns []Warning
}

func (c *checker) str(k string) string    { s, _ := c.vals[k].(string); return s }
func (c *checker) int(k string) int64     { n, _ := c.vals[k].(int64); return n }
func (c *checker) bool(k string) bool     { b, _ := c.vals[k].(bool); return b }
func (c *checker) list(k string) []string { l, _ := c.vals[k].([]string); return l }

// changed reports whether a layer above the defaults set the key to a
// value other than its default.
func (c *checker) changed(k string) bool {
	return c.ld.Source(k).Layer != LayerDefault && !reflect.DeepEqual(c.vals[k], keyByName[k].Default)
}

// fail records an error naming every key with its value and origin.
func (c *checker) fail(msg string, names ...string) {
	e := &Error{Msg: msg}
	for _, n := range names {
		e.Keys = append(e.Keys, n)
		e.Origins = append(e.Origins, c.ld.Source(n))
		e.Values = append(e.Values, shownValue(keyByName[n], c.vals[n]))
	}
	c.errs = append(c.errs, e)
}

// warn records a warning about a key, naming where its value came from.
func (c *checker) warn(k, msg string) {
	c.warns = append(c.warns, Warning{Subject: k + " (" + c.ld.Source(k).String() + ")", Msg: msg})
}

// crossCheck runs every rule over the merged values.
func crossCheck(vals map[string]any, ld *Loaded) ([]error, []Warning) {
	c := &checker{vals: vals, ld: ld}
	for _, r := range rules {
		r.check(c)
	}
	return c.errs, c.warns
}
