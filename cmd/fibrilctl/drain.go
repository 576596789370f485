package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"time"
)

// nodeAdmin returns the globals with --admin pointing at node's admin API,
// as the cluster lists it (GET /admin/api/topology at --admin); the
// credentials and TLS settings stay those of --admin. An unspecified host
// (a listener bound to 0.0.0.0 or [::]) is replaced by the host of the
// node's peer address. It also returns a name for the target, for the
// output. Without a node, the target is --admin itself.
func nodeAdmin(ctx context.Context, g *globals, e *env, node string) (*globals, string, error) {
	if node == "" {
		return g, "broker at " + g.admin, nil
	}
	v, err := fetchCluster(ctx, g, e)
	if err != nil {
		return nil, "", fmt.Errorf("find node %s: %w", node, err)
	}
	var ids []string
	for _, n := range v.Nodes {
		ids = append(ids, n.ID)
		if n.ID != node {
			continue
		}
		addr := n.AdminAddr
		if addr == "" {
			return nil, "", fmt.Errorf("node %s publishes no admin address: run the command with --admin at its admin listener", node)
		}
		if host, port, err := net.SplitHostPort(addr); err == nil {
			if ip := net.ParseIP(host); (host == "" || ip != nil && ip.IsUnspecified()) && n.PeerAddr != "" {
				if ph, _, err := net.SplitHostPort(n.PeerAddr); err == nil && ph != "" {
					addr = net.JoinHostPort(ph, port)
				}
			}
		}
		h := *g
		h.admin = addr
		return &h, fmt.Sprintf("node %s (admin %s)", node, addr), nil
	}
	sort.Strings(ids)
	return nil, "", fmt.Errorf("node %q is not in the cluster the broker at %s knows (nodes: %s)", node, g.admin, strings.Join(ids, ", "))
}

// printJSON writes v indented.
func printJSON(e *env, v any) error {
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// nodeAdminClient is nodeAdmin's admin client for node ("": --admin's
// broker) and the words that name it.
func nodeAdminClient(ctx context.Context, g *globals, e *env, node string) (*adminClient, string, error) {
	h, target, err := nodeAdmin(ctx, g, e, node)
	if err != nil {
		return nil, "", err
	}
	a, err := h.adminClient(e)
	return a, target, err
}

// runDrain is `fibrilctl drain`: POST /admin/api/drain (S-127, S-128) on
// the broker at --admin, or on node N of its cluster.
func runDrain(ctx context.Context, g *globals, e *env, args []string) error {
	fs := newFlagSet("drain", "[--node N] [--grace D] [--message M] [--json]", g, e)
	node := fs.String("node", "", "drain this node of the cluster (its admin address comes from the topology at --admin)")
	grace := fs.Duration("grace", 30*time.Second, "how long the clients are given to move (GOING_AWAY's grace)")
	message := fs.String("message", "", "the GOING_AWAY message (default: the broker's \"broker draining\")")
	asJSON := fs.Bool("json", false, "print the broker's answer as JSON")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	if *grace < 0 {
		return usagef("--grace must not be negative")
	}
	a, target, err := nodeAdminClient(ctx, g, e, *node)
	if err != nil {
		return err
	}
	body := map[string]any{"grace_ms": grace.Milliseconds()}
	if *message != "" {
		body["message"] = *message
	}
	var out map[string]any
	if err := a.do(ctx, http.MethodPost, "/admin/api/drain", body, &out); err != nil {
		return err
	}
	if *asJSON {
		return printJSON(e, out)
	}
	notified, _ := out["connections_notified"].(float64)
	remaining, _ := out["owned_partitions_remaining"].(float64)
	fmt.Fprintf(e.stdout, "draining %s\n", target)
	fmt.Fprintf(e.stdout, "  connections sent GOING_AWAY: %d (grace %s)\n", int(notified), *grace)
	if remaining > 0 {
		again := "fibrilctl drain"
		if *node != "" {
			again += " --node " + *node
		}
		fmt.Fprintf(e.stdout, "  partitions still owned:      %d, being handed to in-sync followers (run %q again to follow)\n", int(remaining), again)
	} else {
		fmt.Fprintf(e.stdout, "  partitions still owned:      0 (handoff complete)\n")
	}
	fmt.Fprintf(e.stdout, "it takes no new partitions and /readyz is false until 'fibrilctl undrain'\n")
	return nil
}

// runUndrain is `fibrilctl undrain`: POST /admin/api/undrain.
func runUndrain(ctx context.Context, g *globals, e *env, args []string) error {
	fs := newFlagSet("undrain", "[--node N] [--json]", g, e)
	node := fs.String("node", "", "undrain this node of the cluster (its admin address comes from the topology at --admin)")
	asJSON := fs.Bool("json", false, "print the broker's answer as JSON")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	a, target, err := nodeAdminClient(ctx, g, e, *node)
	if err != nil {
		return err
	}
	var out struct {
		WasDraining      bool   `json:"was_draining"`
		OwnedPartitions  *int   `json:"owned_partitions"`
		FencesLifted     int    `json:"fences_lifted"`
		FencedHandedOver int    `json:"fenced_handed_over"`
		FencesHeld       int    `json:"fences_held"`
		Note             string `json:"note"`
	}
	var raw json.RawMessage
	if err := a.do(ctx, http.MethodPost, "/admin/api/undrain", nil, &raw); err != nil {
		return err
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return fmt.Errorf("admin API: malformed answer: %w", err)
	}
	if *asJSON {
		var v any
		_ = json.Unmarshal(raw, &v)
		if err := printJSON(e, v); err != nil {
			return err
		}
	} else {
		if out.WasDraining {
			fmt.Fprintf(e.stdout, "undrained %s: it may get new partitions again and reports ready when otherwise healthy\n", target)
		} else {
			fmt.Fprintf(e.stdout, "%s was not draining; nothing to undo\n", target)
		}
		if out.OwnedPartitions != nil {
			fmt.Fprintf(e.stdout, "  partitions it owns:     %d\n", *out.OwnedPartitions)
			fmt.Fprintf(e.stdout, "  handoff fences lifted:  %d\n", out.FencesLifted)
		}
		if out.WasDraining && out.Note != "" {
			fmt.Fprintf(e.stdout, "note: %s\n", out.Note)
		}
	}
	if out.FencesHeld > 0 {
		return fmt.Errorf("%d partition(s) still fenced: their handoff's outcome was not known yet; run undrain again", out.FencesHeld)
	}
	return nil
}
