package raft

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/config"
	"github.com/fibrilgo/fibril/core/tlsconf"
	"github.com/fibrilgo/fibril/plugins"
)

func init() { plugins.RegisterCoordination("raft", Factory) }

// Config keys the factory reads from plugins.CoordinationEnv.Config.
const (
	keyListen          = "coordination.raft.listen"
	keyAdvertise       = "coordination.raft.advertise"
	keyPeers           = "coordination.raft.peers"
	keyBootstrapExpect = "coordination.raft.bootstrap_expect"
	keyVoter           = "coordination.raft.voter"
	keyHeartbeat       = "coordination.heartbeat_interval_ms"
	keyLivenessTTL     = "coordination.liveness_ttl_ms"
)

// ConfigKeys documents the backend's own keys for plugins.Info (names
// without the "coordination.raft." prefix).
var ConfigKeys = []plugins.ConfigKey{
	{Name: "listen", Type: "string", Default: DefaultListen, Doc: "host:port of the raft + RPC port; empty: this node's peers entry, else the default"},
	{Name: "advertise", Type: "string", Doc: "host:port other members dial; empty: the bound address"},
	{Name: "peers", Type: "list", Doc: "initial voters as id=host:port, this node included"},
	{Name: "bootstrap_expect", Type: "int", Default: "0", Doc: "members to reach before the smallest listed id bootstraps a new cluster; 0: only join"},
	{Name: "voter", Type: "bool", Default: "true", Doc: "false joins as a non-voter"},
}

// DefaultListen is where a member listens when coordination.raft.listen
// is empty and coordination.raft.peers does not list this node.
const DefaultListen = "127.0.0.1:9877"

// Factory opens a member from the host's environment: the built-in
// registration and the external binary (cmd/fibril-coord-raft) share it.
func Factory(ctx context.Context, env plugins.CoordinationEnv) (core.Coordinator, error) {
	o, err := OptionsFromEnv(env)
	if err != nil {
		return nil, err
	}
	return Open(ctx, o)
}

// OptionsFromEnv turns the host's environment into Options. Errors name
// the config key at fault. When coordination.raft.listen is empty the
// member listens on its own coordination.raft.peers entry, else on
// DefaultListen.
func OptionsFromEnv(env plugins.CoordinationEnv) (Options, error) {
	cfg := env.Config
	o := Options{
		NodeID:     string(env.NodeID),
		DataDir:    env.DataDir,
		Listen:     strings.TrimSpace(cfg[keyListen]),
		Advertise:  strings.TrimSpace(cfg[keyAdvertise]),
		Secret:     []byte(env.ClusterSecret),
		Logger:     env.Logger,
		Registerer: env.Registerer,
	}
	for _, s := range strings.Split(cfg[keyPeers], ",") {
		if strings.TrimSpace(s) == "" {
			continue
		}
		p, err := config.ParseRaftPeer(s)
		if err != nil {
			return Options{}, fmt.Errorf("raft: %s: %w", keyPeers, err)
		}
		o.Peers = append(o.Peers, Peer{ID: p.ID, Addr: p.Addr})
	}
	var err error
	if o.BootstrapExpect, err = intKey(cfg, keyBootstrapExpect, 0); err != nil {
		return Options{}, err
	}
	voter, err := boolKey(cfg, keyVoter, true)
	if err != nil {
		return Options{}, err
	}
	o.NonVoter = !voter
	hb, err := intKey(cfg, keyHeartbeat, int(defaultHeartbeat.Milliseconds()))
	if err != nil {
		return Options{}, err
	}
	ttl, err := intKey(cfg, keyLivenessTTL, int(defaultLivenessTTL.Milliseconds()))
	if err != nil {
		return Options{}, err
	}
	o.HeartbeatInterval = time.Duration(hb) * time.Millisecond
	o.LivenessTTL = time.Duration(ttl) * time.Millisecond
	if o.Listen == "" {
		o.Listen = DefaultListen
		if self, ok := o.selfPeer(); ok {
			o.Listen = self.Addr
		}
	}
	if t := env.PeerTLS; t != nil {
		o.TLS, err = tlsconf.LoadPeer(tlsconf.PeerOptions{
			NodeID: o.NodeID, CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile, Logger: env.Logger,
		})
		if err != nil {
			return Options{}, fmt.Errorf("raft: %w", err)
		}
	}
	return o, nil
}

func intKey(cfg map[string]string, key string, def int) (int, error) {
	s := strings.TrimSpace(cfg[key])
	if s == "" {
		return def, nil
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("raft: %s %q: expected a non-negative integer", key, s)
	}
	return v, nil
}

func boolKey(cfg map[string]string, key string, def bool) (bool, error) {
	s := strings.TrimSpace(cfg[key])
	if s == "" {
		return def, nil
	}
	v, err := strconv.ParseBool(s)
	if err != nil {
		return false, fmt.Errorf("raft: %s %q: expected true or false", key, s)
	}
	return v, nil
}
