package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"text/tabwriter"
)

// connInfo is one entry of GET /admin/api/connections (core/session
// ConnInfo).
type connInfo struct {
	Conn          uint64   `json:"conn"`
	ClientID      string   `json:"client_id"`
	User          string   `json:"user"`
	Remote        string   `json:"remote_addr"`
	Subscriptions []string `json:"subscriptions"`
	Upstreams     []string `json:"upstreams"`
	Forwarded     *struct {
		OriginNode string `json:"origin_node"`
		ActingUser string `json:"acting_user"`
		Summary    string `json:"summary"`
	} `json:"forwarded"`
}

// runConnections is `fibrilctl connections`: one line per client
// connection open on the broker at --admin.
func runConnections(ctx context.Context, g *globals, e *env, args []string) error {
	fs := newFlagSet("connections", "[--json]", g, e)
	asJSON := fs.Bool("json", false, "print the admin API's answer as JSON")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	a, err := g.adminClient(e)
	if err != nil {
		return err
	}
	var raw json.RawMessage
	if err := a.do(ctx, http.MethodGet, "/admin/api/connections", nil, &raw); err != nil {
		return err
	}
	if *asJSON {
		return printIndented(e, raw)
	}
	var v struct {
		Connections []connInfo `json:"connections"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return fmt.Errorf("admin API: malformed answer: %w", err)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CONN\tCLIENT\tUSER\tREMOTE\tSUBSCRIPTIONS\tFORWARDING")
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	for _, c := range v.Connections {
		fwd := "-"
		switch {
		case c.Forwarded != nil && c.Forwarded.Summary != "":
			fwd = c.Forwarded.Summary
		case c.Forwarded != nil:
			fwd = fmt.Sprintf("via node %s for user %s", c.Forwarded.OriginNode, dash(c.Forwarded.ActingUser))
		case len(c.Upstreams) > 0:
			fwd = "to owners " + strings.Join(c.Upstreams, ",")
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\n", c.Conn, dash(c.ClientID), dash(c.User), dash(c.Remote), len(c.Subscriptions), fwd)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "\n%d connection(s)\n", len(v.Connections))
	return nil
}
