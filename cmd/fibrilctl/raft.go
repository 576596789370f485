package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"text/tabwriter"
	"time"
)

// consensusMember is one member of GET /admin/api/raft/members.
type consensusMember struct {
	ID        string     `json:"id"`
	Addr      string     `json:"addr"`
	Voter     bool       `json:"voter"`
	Leader    bool       `json:"leader"`
	Reachable bool       `json:"reachable"`
	DownSince *time.Time `json:"down_since"`
}

// runRaft is `fibrilctl raft peers | remove-peer NODE | add-voter NODE
// [--addr A] | demote NODE`: the built-in raft group's members, through
// the admin API of any broker of the cluster.
func runRaft(ctx context.Context, g *globals, e *env, args []string) error {
	fs := newFlagSet("raft", "peers [--json] | remove-peer NODE | add-voter NODE [--raft-addr A] | demote NODE", g, e)
	asJSON := fs.Bool("json", false, "print the broker's answer as JSON")
	addr := fs.String("raft-addr", "", "add-voter: the raft address (host:port) of a node that is not a member yet")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("raft needs a subcommand: peers, remove-peer NODE, add-voter NODE or demote NODE")
	}
	a, err := g.adminClient(e)
	if err != nil {
		return err
	}
	sub, pos := pos[0], pos[1:]
	var raw json.RawMessage
	switch sub {
	case "peers":
		if len(pos) != 0 {
			return usagef("raft peers takes no argument")
		}
		if err := a.do(ctx, http.MethodGet, "/admin/api/raft/members", nil, &raw); err != nil {
			return err
		}
	case "remove-peer", "add-voter", "demote":
		if len(pos) != 1 {
			return usagef("raft %s takes exactly one NODE", sub)
		}
		if *addr != "" && sub != "add-voter" {
			return usagef("--raft-addr is for add-voter only")
		}
		path := map[string]string{"remove-peer": "remove", "add-voter": "add-voter", "demote": "demote"}[sub]
		body := map[string]string{"node": pos[0]}
		if *addr != "" {
			body["addr"] = *addr
		}
		if err := a.do(ctx, http.MethodPost, "/admin/api/raft/"+path, body, &raw); err != nil {
			return err
		}
		if !*asJSON {
			fmt.Fprintf(e.stdout, "raft %s %s: done\n", sub, pos[0])
		}
	default:
		return usagef("unknown raft subcommand %q (peers, remove-peer, add-voter, demote)", sub)
	}
	if *asJSON {
		return printIndented(e, raw)
	}
	var out struct {
		Members []consensusMember `json:"members"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return fmt.Errorf("admin API: malformed answer: %w", err)
	}
	if len(out.Members) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tADDRESS\tROLE\tREACHABLE")
	for _, m := range out.Members {
		role := "non-voter"
		switch {
		case m.Leader:
			role = "leader"
		case m.Voter:
			role = "voter"
		}
		reach := "yes"
		if !m.Reachable {
			reach = "no"
			if m.DownSince != nil {
				reach += " (since " + m.DownSince.UTC().Format(time.RFC3339) + ")"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", m.ID, m.Addr, role, reach)
	}
	return tw.Flush()
}
