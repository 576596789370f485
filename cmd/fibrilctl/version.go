package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/fibrilgo/fibril/core/buildinfo"
)

// runVersion is `fibrilctl version`: this CLI's build, then the build of
// the broker at --admin (GET /admin/api/overview). The CLI's line is
// printed even when the broker cannot be asked.
func runVersion(ctx context.Context, g *globals, e *env, args []string) error {
	fs := newFlagSet("version", "[--json] [--client]", g, e)
	asJSON := fs.Bool("json", false, "print both builds as JSON")
	clientOnly := fs.Bool("client", false, "print the CLI's build only; do not ask the broker")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	mine := buildinfo.Get()
	if !*asJSON {
		fmt.Fprintln(e.stdout, "fibrilctl", mine)
	}
	if *clientOnly {
		if *asJSON {
			return printJSON(e, map[string]any{"client": mine})
		}
		return nil
	}
	var ov struct {
		Node  string         `json:"node"`
		Mode  string         `json:"mode"`
		Build buildinfo.Info `json:"build"`
	}
	err := func() error {
		a, err := g.adminClient(e)
		if err != nil {
			return err
		}
		var raw json.RawMessage
		if err := a.do(ctx, http.MethodGet, "/admin/api/overview", nil, &raw); err != nil {
			return err
		}
		if err := json.Unmarshal(raw, &ov); err != nil || ov.Build.Version == "" {
			return fmt.Errorf("admin API: the overview names no build (a broker older than this CLI?)")
		}
		return nil
	}()
	if *asJSON {
		out := map[string]any{"client": mine}
		if err == nil {
			out["broker"] = map[string]any{"admin": g.admin, "node": ov.Node, "mode": ov.Mode, "build": ov.Build}
		}
		if perr := printJSON(e, out); perr != nil {
			return perr
		}
		return err
	}
	if err != nil {
		return fmt.Errorf("broker at %s: %w", g.admin, err)
	}
	where := ov.Mode
	if ov.Node != "" {
		where = "node " + ov.Node + ", " + where
	}
	fmt.Fprintf(e.stdout, "fibril %s at %s (%s)\n", ov.Build, g.admin, where)
	return nil
}
