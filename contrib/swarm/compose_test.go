// Package swarm holds the Compose / Swarm example (compose.yaml,
// Dockerfile, README.md); its test keeps the example true.
package swarm

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fibrilgo/fibril/core/config"
)

type service struct {
	name    string
	env     []string // KEY=VALUE
	publish bool     // has a ports: section
}

// parseCompose reads the services of compose.yaml: their environment
// entries and whether they publish ports. It understands the file's own
// layout (two-space indentation), not YAML in general.
func parseCompose(t *testing.T, path string) []*service {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []*service
	var cur *service
	inServices, inEnv := false, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		indent := len(line) - len(strings.TrimLeft(line, " "))
		switch {
		case indent == 0:
			inServices = trimmed == "services:"
			cur, inEnv = nil, false
		case inServices && indent == 2:
			cur = &service{name: strings.TrimSuffix(trimmed, ":")}
			out = append(out, cur)
			inEnv = false
		case cur != nil && indent == 4:
			inEnv = trimmed == "environment:"
			if trimmed == "ports:" {
				cur.publish = true
			}
		case cur != nil && inEnv && indent == 6:
			k, v, ok := strings.Cut(trimmed, ":")
			if !ok {
				t.Fatalf("%s: environment line %q", cur.name, trimmed)
			}
			cur.env = append(cur.env, k+"="+strings.Trim(strings.TrimSpace(v), `"`))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// The example must deploy as written: every broker's environment is a valid configuration; only
// the public broker publishes a port; node ids and peer addresses are
// distinct; every broker lists the same raft peers.
func TestComposeExample(t *testing.T) {
	services := parseCompose(t, "compose.yaml")
	if len(services) != 3 {
		t.Fatalf("%d services, want 3", len(services))
	}
	ids, peerAddrs, raftPeers := map[string]bool{}, map[string]bool{}, map[string]bool{}
	public := 0
	secrets := t.TempDir() // stands in for /run/secrets, where Docker mounts them
	for _, s := range services {
		for i, kv := range s.env {
			if k, v, _ := strings.Cut(kv, "="); strings.HasPrefix(v, "/run/secrets/") {
				path := filepath.Join(secrets, strings.TrimPrefix(v, "/run/secrets/"))
				if err := os.WriteFile(path, []byte("from-a-secret\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				s.env[i] = k + "=" + path
			}
		}
		cfg, ld, err := config.Load(nil, s.env)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		for _, w := range ld.Warnings {
			t.Errorf("%s: config warning: %s", s.name, w)
		}
		private := cfg.Broker.Visibility == "private"
		if !private {
			public++
		}
		if s.publish == private {
			t.Errorf("%s: visibility %s but publishes ports: %v", s.name, cfg.Broker.Visibility, s.publish)
		}
		ids[cfg.Coordination.NodeID] = true
		peerAddrs[cfg.Broker.PeerAdvertise] = true
		raftPeers[strings.Join(cfg.Coordination.Raft.Peers, ",")] = true
		if !strings.HasPrefix(cfg.Broker.PeerAdvertise, s.name+":") {
			t.Errorf("%s: peer address %q is not the service's own name", s.name, cfg.Broker.PeerAdvertise)
		}
	}
	if public != 1 || len(ids) != 3 || len(peerAddrs) != 3 || len(raftPeers) != 1 {
		t.Fatalf("public %d, node ids %v, peer addresses %v, raft peer lists %v", public, ids, peerAddrs, raftPeers)
	}
}

// `docker compose config` accepts the file, where the docker client and its
// compose plugin exist (it parses; it starts nothing).
func TestComposeConfigWithDocker(t *testing.T) {
	if err := exec.Command("docker", "compose", "version").Run(); err != nil {
		t.Skip("docker compose is not installed here; TestComposeExample checks the file without it")
	}
	dir := t.TempDir()
	for _, f := range []string{"compose.yaml", "Dockerfile"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"cluster.secret", "app.password"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("test-secret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("docker", "compose", "-f", filepath.Join(dir, "compose.yaml"), "config", "-q")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docker compose config: %v\n%s", err, out)
	}
}
