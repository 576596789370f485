package auth

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/fibrilgo/fibril/core/config"
)

// ClusterSecretFile is the file name looked up in server.data_dir when
// neither FIBRIL_CLUSTER_SECRET nor coordination.secret_path is set.
const ClusterSecretFile = "cluster.secret"

// ResolveClusterSecret finds the cluster secret in S-149 order:
//
//  1. FIBRIL_CLUSTER_SECRET (config holds it as coordination.secret),
//  2. the file named by coordination.secret_path, which must exist,
//  3. <data_dir>/cluster.secret, if present.
//
// It returns nil with no error when there is none: a standalone broker
// needs no secret (the caller refuses coordinated mode without one), and
// @node logins are then refused. origin names where the secret came from,
// for the startup log; the secret itself is never part of an error. File
// contents lose trailing line breaks (editors add one); a secret that is
// empty after that is an error, since "every node holds the same empty
// value" would let anyone log in as @node.
func ResolveClusterSecret(cfg config.Config) (secret []byte, origin string, err error) {
	c := cfg.Coordination
	if c.Secret.IsSet() {
		return []byte(c.Secret.Reveal()), "env FIBRIL_CLUSTER_SECRET", nil
	}
	if c.SecretPath != "" {
		s, err := readSecretFile(c.SecretPath)
		if err != nil {
			return nil, "", fmt.Errorf("coordination.secret_path: %w", err)
		}
		return s, c.SecretPath, nil
	}
	if cfg.Server.DataDir == "" {
		return nil, "", nil
	}
	path := filepath.Join(cfg.Server.DataDir, ClusterSecretFile)
	s, err := readSecretFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", err
	}
	return s, path, nil
}

func readSecretFile(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cluster secret: %w", err)
	}
	data = bytes.TrimRight(data, "\r\n")
	if len(data) == 0 {
		return nil, fmt.Errorf("cluster secret file %s is empty; put the shared secret in it (the same value on every node)", path)
	}
	return data, nil
}
