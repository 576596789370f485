package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"text/tabwriter"
)

// peersView is GET /admin/api/peers.
type peersView struct {
	Node      string `json:"node"`
	Transport string `json:"transport"`
	PeerAddr  string `json:"peer_addr"`
	Peers     []struct {
		Node         string  `json:"node"`
		PeerAddr     string  `json:"peer_addr"`
		OK           bool    `json:"ok"`
		VerifiedNode string  `json:"verified_node"`
		ConnectMS    float64 `json:"connect_ms"`
		RoundTripMS  float64 `json:"round_trip_ms"`
		Error        string  `json:"error"`
	} `json:"peers"`
}

// runPeers is `fibrilctl peers`: the broker at --admin opens a stream to
// every live peer over its transport, logs in as @node and makes one round
// trip; one line per peer says whether that worked and how long it took.
// It exits non-zero when any peer is unreachable, so scripts can gate on it.
func runPeers(ctx context.Context, g *globals, e *env, args []string) error {
	fs := newFlagSet("peers", "[--json]", g, e)
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	a, err := g.adminClient(e)
	if err != nil {
		return err
	}
	var v peersView
	if err := a.do(ctx, http.MethodGet, "/admin/api/peers", nil, &v); err != nil {
		return err
	}
	bad := 0
	for _, p := range v.Peers {
		if !p.OK {
			bad++
		}
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(v); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(e.stdout, "node %s, transport %s, peers reach it at %s\n", v.Node, v.Transport, v.PeerAddr)
		tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "PEER\tADDRESS\tSTATE\tCERT NODE\tCONNECT\tROUND TRIP\tERROR")
		for _, p := range v.Peers {
			state, cert, errText := "ok", p.VerifiedNode, p.Error
			if !p.OK {
				state = "UNREACHABLE"
			}
			if cert == "" {
				cert = "-"
			}
			if errText == "" {
				errText = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.2f ms\t%.2f ms\t%s\n", p.Node, p.PeerAddr, state, cert, p.ConnectMS, p.RoundTripMS, errText)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d peers unreachable", bad, len(v.Peers))
	}
	return nil
}
