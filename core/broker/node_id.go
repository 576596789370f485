package broker

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/config"
)

// nodeIDFile keeps the generated node id in the data directory.
const nodeIDFile = "node_id"

// loadNodeID returns coordination.node_id, else the id kept in the data
// directory, generating it on first start, so a restarted broker is the same
// member of the cluster.
func loadNodeID(cfg *config.Config) (core.NodeID, error) {
	if id := cfg.Coordination.NodeID; id != "" {
		return core.NodeID(id), nil
	}
	path := filepath.Join(cfg.Server.DataDir, nodeIDFile)
	b, err := os.ReadFile(path)
	if err == nil {
		id := strings.TrimSpace(string(b))
		if id == "" {
			return "", fmt.Errorf("%s is empty; delete it to generate a new node id", path)
		}
		return core.NodeID(id), nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	var r [6]byte
	_, _ = rand.Read(r[:])
	id := "node-" + hex.EncodeToString(r[:])
	if err := writeFileSync(path, []byte(id+"\n")); err != nil {
		return "", fmt.Errorf("server.data_dir: keep node id: %w", err)
	}
	return core.NodeID(id), nil
}
