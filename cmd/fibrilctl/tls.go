package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// runTLS is `fibrilctl tls reload [--node N] [--json]`: the broker
// re-reads its certificate files (POST /admin/api/tls/reload), as SIGHUP
// does; refused material leaves the previous certificate serving.
func runTLS(ctx context.Context, g *globals, e *env, args []string) error {
	fs := newFlagSet("tls", "reload [--node N] [--json]", g, e)
	node := fs.String("node", "", "reload this node of the cluster (its admin address comes from the topology at --admin)")
	asJSON := fs.Bool("json", false, "print the broker's answer as JSON")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || pos[0] != "reload" {
		return usagef("tls needs a subcommand: reload [--node N] [--json]")
	}
	a, target, err := nodeAdminClient(ctx, g, e, *node)
	if err != nil {
		return err
	}
	var raw json.RawMessage
	if err := a.do(ctx, http.MethodPost, "/admin/api/tls/reload", nil, &raw); err != nil {
		return err
	}
	if *asJSON {
		return printIndented(e, raw)
	}
	var out struct {
		Leaf     string `json:"leaf_sha256"`
		NotAfter string `json:"not_after"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return fmt.Errorf("admin API: malformed answer: %w", err)
	}
	fmt.Fprintf(e.stdout, "%s serves a new certificate on its client and admin listeners: sha256 %s, valid until %s\n", target, out.Leaf, out.NotAfter)
	return nil
}
