package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// runLogLevel is `fibrilctl log-level [LEVEL] [--node N] [--json]`: print
// the broker's log level, or change it at once (until the broker
// restarts, which starts again at log.level).
func runLogLevel(ctx context.Context, g *globals, e *env, args []string) error {
	fs := newFlagSet("log-level", "[debug|info|warn|error] [--node N] [--json]", g, e)
	node := fs.String("node", "", "the node of the cluster to ask (its admin address comes from the topology at --admin)")
	asJSON := fs.Bool("json", false, "print the broker's answer as JSON")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return usagef("log-level takes at most one level: debug, info, warn or error")
	}
	a, target, err := nodeAdminClient(ctx, g, e, *node)
	if err != nil {
		return err
	}
	var raw json.RawMessage
	if len(pos) == 0 {
		err = a.do(ctx, http.MethodGet, "/admin/api/log-level", nil, &raw)
	} else {
		err = a.do(ctx, http.MethodPut, "/admin/api/log-level", map[string]string{"level": pos[0]}, &raw)
	}
	if err != nil {
		return err
	}
	if *asJSON {
		return printIndented(e, raw)
	}
	var out struct{ Level, Previous string }
	if err := json.Unmarshal(raw, &out); err != nil {
		return fmt.Errorf("admin API: malformed answer: %w", err)
	}
	if out.Previous != "" {
		fmt.Fprintf(e.stdout, "%s logs at %s now (was %s) until it restarts\n", target, out.Level, out.Previous)
	} else {
		fmt.Fprintf(e.stdout, "%s logs at %s\n", target, out.Level)
	}
	return nil
}
