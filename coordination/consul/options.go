package consul

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fibrilgo/fibril/plugins"
)

// Config keys the factory reads from plugins.CoordinationEnv.Config.
const (
	KeyAddresses  = "coordination.consul.addresses"
	KeyDatacenter = "coordination.consul.datacenter"
	KeyToken      = "coordination.consul.token"
	KeyTokenPath  = "coordination.consul.token_path"
	KeyCAPath     = "coordination.consul.ca_path"
	KeyCertPath   = "coordination.consul.cert_path"
	KeyKeyPath    = "coordination.consul.key_path"
	KeyServerName = "coordination.consul.tls_server_name"
	KeyPrefix     = "coordination.consul.prefix"
	KeySessionTTL = "coordination.consul.session_ttl_ms"
	keyNodeID     = "coordination.node_id"
)

// Defaults.
const (
	DefaultAddress = "127.0.0.1:8500"
	DefaultPrefix  = "fibril"
	// MinSessionTTL is Consul's floor for a session TTL.
	MinSessionTTL = 10 * time.Second
	// maxSessionTTL is Consul's ceiling.
	maxSessionTTL = 24 * time.Hour
)

// ConfigKeys documents the backend's own keys for plugins.Info (names
// without the "coordination.consul." prefix).
var ConfigKeys = []plugins.ConfigKey{
	{Name: "addresses", Type: "list", Default: DefaultAddress, Doc: "Consul agents as host:port, http://host:port or https://host:port; the first that answers is used, the next on a connection error"},
	{Name: "datacenter", Type: "string", Doc: "Consul datacenter; empty: the agent's own"},
	{Name: "token", Type: "string", Doc: "ACL token (environment FIBRIL_CONSUL_TOKEN only; never logged)"},
	{Name: "token_path", Type: "string", Doc: "file holding the ACL token, used when the token is not set"},
	{Name: "ca_path", Type: "string", Doc: "PEM CA bundle the agent's HTTPS certificate is verified against"},
	{Name: "cert_path", Type: "string", Doc: "client certificate (PEM) presented to the agent"},
	{Name: "key_path", Type: "string", Doc: "key of cert_path (PEM)"},
	{Name: "tls_server_name", Type: "string", Doc: "name the agent's certificate must carry; empty: the address's host"},
	{Name: "prefix", Type: "string", Default: DefaultPrefix, Doc: "every key this cluster writes lives under this KV prefix; clusters sharing one Consul need different prefixes"},
	{Name: "session_ttl_ms", Type: "int", Default: "10000", Doc: "TTL of this node's Consul sessions (leases); at least 10000, Consul's floor"},
}

// Options configures a Coordinator.
type Options struct {
	// NodeID names this member in session names and election values.
	NodeID string
	// Addresses are the agents to talk to, in order of preference.
	Addresses []string
	// Datacenter is the Consul datacenter ("" = the agent's).
	Datacenter string
	// Token is the ACL token ("" = the agent's default).
	Token string
	// TLS to the agent: used for https:// addresses.
	CAFile, CertFile, KeyFile, ServerName string
	// Prefix is the KV prefix every key lives under (no leading or
	// trailing '/').
	Prefix string
	// SessionTTL is the floor of every lease TTL (≥ MinSessionTTL).
	SessionTTL time.Duration
	// Logger receives state changes (nil: discard).
	Logger *slog.Logger
	// Registerer receives the fibril_consul_* series (nil: none).
	Registerer prometheus.Registerer
}

// OptionsFromEnv turns the host's environment into Options. Errors name
// the config key at fault.
func OptionsFromEnv(env plugins.CoordinationEnv) (Options, error) {
	cfg := env.Config
	o := Options{
		NodeID:     string(env.NodeID),
		Datacenter: strings.TrimSpace(cfg[KeyDatacenter]),
		Token:      strings.TrimSpace(cfg[KeyToken]),
		CAFile:     strings.TrimSpace(cfg[KeyCAPath]),
		CertFile:   strings.TrimSpace(cfg[KeyCertPath]),
		KeyFile:    strings.TrimSpace(cfg[KeyKeyPath]),
		ServerName: strings.TrimSpace(cfg[KeyServerName]),
		Prefix:     strings.TrimSpace(cfg[KeyPrefix]),
		Logger:     env.Logger,
		Registerer: env.Registerer,
	}
	for _, a := range strings.Split(cfg[KeyAddresses], ",") {
		if a = strings.TrimSpace(a); a != "" {
			o.Addresses = append(o.Addresses, a)
		}
	}
	if o.Token == "" {
		if p := strings.TrimSpace(cfg[KeyTokenPath]); p != "" {
			b, err := os.ReadFile(p)
			if err != nil {
				return Options{}, fmt.Errorf("consul: %s: %w", KeyTokenPath, err)
			}
			o.Token = strings.TrimSpace(string(b))
			if o.Token == "" {
				return Options{}, fmt.Errorf("consul: %s: %s is empty", KeyTokenPath, p)
			}
		}
	}
	if s := strings.TrimSpace(cfg[KeySessionTTL]); s != "" {
		ms, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return Options{}, fmt.Errorf("consul: %s %q: expected milliseconds", KeySessionTTL, s)
		}
		o.SessionTTL = time.Duration(ms) * time.Millisecond
	}
	return o, o.normalize()
}

// normalize fills defaults and checks every field, naming its config key.
func (o *Options) normalize() error {
	if len(o.Addresses) == 0 {
		o.Addresses = []string{DefaultAddress}
	}
	for _, a := range o.Addresses {
		if _, _, err := splitAddress(a); err != nil {
			return fmt.Errorf("consul: %s: %w", KeyAddresses, err)
		}
	}
	o.Prefix = strings.Trim(o.Prefix, "/")
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if strings.ContainsAny(o.Prefix, " \t\n") || strings.Contains(o.Prefix, "//") {
		return fmt.Errorf("consul: %s %q: a KV path without blanks or empty segments", KeyPrefix, o.Prefix)
	}
	switch {
	case o.SessionTTL == 0:
		o.SessionTTL = MinSessionTTL
	case o.SessionTTL < MinSessionTTL || o.SessionTTL > maxSessionTTL:
		return fmt.Errorf("consul: %s %d: Consul accepts session TTLs from 10000 to 86400000 ms", KeySessionTTL, o.SessionTTL.Milliseconds())
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return fmt.Errorf("consul: %s and %s go together", KeyCertPath, KeyKeyPath)
	}
	for key, p := range map[string]string{KeyCAPath: o.CAFile, KeyCertPath: o.CertFile, KeyKeyPath: o.KeyFile} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("consul: %s: %w", key, err)
		}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// splitAddress accepts host:port or a URL with scheme http or https.
func splitAddress(a string) (scheme, hostport string, err error) {
	scheme = "http"
	if strings.Contains(a, "://") {
		u, err := url.Parse(a)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return "", "", fmt.Errorf("%q: expected host:port, http://host:port or https://host:port", a)
		}
		return u.Scheme, u.Host, nil
	}
	if !strings.Contains(a, ":") {
		return "", "", fmt.Errorf("%q: expected host:port", a)
	}
	return scheme, a, nil
}

// clients returns a Consul API client per agent address, in order, and
// each client's connection pool (so the Coordinator can drop connections
// that a network fault left half-open).
func (o *Options) clients() ([]*api.Client, []*http.Transport, error) {
	var clients []*api.Client
	var pools []*http.Transport
	for _, a := range o.Addresses {
		cl, pool, err := o.newClient(a)
		if err != nil {
			return nil, nil, err
		}
		clients, pools = append(clients, cl), append(pools, pool)
	}
	return clients, pools, nil
}

// newClient returns a Consul API client for one agent address with the
// datacenter, token and TLS of o, and its connection pool.
func (o *Options) newClient(address string) (*api.Client, *http.Transport, error) {
	scheme, hostport, err := splitAddress(address)
	if err != nil {
		return nil, nil, fmt.Errorf("consul: %s: %w", KeyAddresses, err)
	}
	if scheme == "http" && (o.CAFile != "" || o.CertFile != "") {
		scheme = "https" // TLS material given: the agent speaks HTTPS
	}
	// DefaultConfig reads CONSUL_HTTP_* variables; every field that
	// matters is set from our own keys below, so they cannot leak in.
	cfg := api.DefaultConfig()
	cfg.Address = hostport
	cfg.Scheme = scheme
	cfg.Datacenter = o.Datacenter
	cfg.Token = o.Token
	cfg.TokenFile = ""
	cfg.HttpAuth = nil
	cfg.Namespace, cfg.Partition = "", ""
	cfg.TLSConfig = api.TLSConfig{Address: o.ServerName, CAFile: o.CAFile, CertFile: o.CertFile, KeyFile: o.KeyFile}
	if scheme == "https" && o.ServerName == "" {
		cfg.TLSConfig.Address = hostOnly(hostport)
	}
	c, err := api.NewClient(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("consul: TLS to the agent (%s, %s, %s): %w", KeyCAPath, KeyCertPath, KeyKeyPath, err)
	}
	return c, cfg.Transport, nil
}

func hostOnly(hostport string) string {
	if i := strings.LastIndex(hostport, ":"); i > 0 {
		return strings.Trim(hostport[:i], "[]")
	}
	return hostport
}
