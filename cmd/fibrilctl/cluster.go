package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
)

// clusterView is GET /admin/api/topology.
type clusterView struct {
	Self       string `json:"self"`
	Index      uint64 `json:"index"`
	Generation uint64 `json:"generation"`
	// Replication is absent from brokers that predate followers.
	Replication *struct {
		TargetFollowers int `json:"target_followers"`
		UnderReplicated int `json:"under_replicated"`
	} `json:"replication"`
	Nodes []struct {
		ID         string            `json:"id"`
		Live       bool              `json:"live"`
		Visibility string            `json:"visibility"`
		Draining   bool              `json:"draining"`
		PeerAddr   string            `json:"peer_addr"`
		AdminAddr  string            `json:"admin_addr"`
		Labels     map[string]string `json:"labels"`
		Controller bool              `json:"controller"`
	} `json:"nodes"`
	Partitions []struct {
		Topic     string `json:"topic"`
		Group     string `json:"group"`
		Kind      string `json:"kind"`
		Partition uint32 `json:"partition"`
		Owner     string `json:"owner"`
		Epoch     uint64 `json:"epoch"`
		Written   bool   `json:"written"`
		OwnerLive bool   `json:"owner_live"`
		Followers []struct {
			Node   string `json:"node"`
			Live   bool   `json:"live"`
			InSync bool   `json:"in_sync"`
			// Known to the partition's owner only (fillTails).
			DurableNext *uint64 `json:"durable_next,omitempty"`
			LagRecords  *uint64 `json:"lag_records,omitempty"`
		} `json:"followers"`
		Endpoints []string `json:"client_endpoints"`
	} `json:"partitions"`
}

func fetchCluster(ctx context.Context, g *globals, e *env) (*clusterView, error) {
	a, err := g.adminClient(e)
	if err != nil {
		return nil, err
	}
	var v clusterView
	if err := a.do(ctx, http.MethodGet, "/admin/api/topology", nil, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// runCluster is `fibrilctl cluster`: one line per node of the cluster, as
// the broker at --admin sees it (partitions owned and followed), then how
// many partitions have fewer live followers than the target allows.
func runCluster(ctx context.Context, g *globals, e *env, args []string) error {
	fs := newFlagSet("cluster", "[--json]", g, e)
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	v, err := fetchCluster(ctx, g, e)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v.Nodes)
	}
	owned, followed := map[string]int{}, map[string]int{}
	for _, p := range v.Partitions {
		owned[p.Owner]++
		for _, f := range p.Followers {
			followed[f.Node]++
		}
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tROLE\tPARTITIONS\tFOLLOWING\tCLIENT ENDPOINTS\tPEER\tADMIN")
	for _, n := range v.Nodes {
		state := "dead"
		if n.Live {
			state = "live"
		}
		if n.Draining {
			state += ",draining"
		}
		if n.Controller {
			state += ",controller"
		}
		if n.ID == v.Self {
			state += ",self"
		}
		eps := n.Labels["fibril/advertise"]
		if eps == "" {
			eps = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", n.ID, state, n.Visibility, owned[n.ID], followed[n.ID], eps, n.PeerAddr, n.AdminAddr)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r := v.Replication; r != nil {
		fmt.Fprintf(e.stdout, "\nunder-replicated partitions: %d (target %d followers, at most live brokers - 1)\n",
			r.UnderReplicated, r.TargetFollowers)
	}
	return nil
}

// fillTails completes v's followers with their durable tails and lags,
// which only each partition's owner knows: it asks the admin API of every
// other live owner (with the same credentials and TLS as --admin) and
// returns how many owners did not answer (an owner on an internal
// network may not be reachable from here).
func fillTails(ctx context.Context, g *globals, e *env, v *clusterView) (unreachable int) {
	owns := map[string]bool{}
	for _, p := range v.Partitions {
		owns[p.Owner] = true
	}
	for _, n := range v.Nodes {
		if n.ID == v.Self || !n.Live || !owns[n.ID] {
			continue
		}
		var ov clusterView
		err := errNoAdminAddr
		if n.AdminAddr != "" {
			h := *g
			h.admin = n.AdminAddr
			var a *adminClient
			if a, err = h.adminClient(e); err == nil {
				err = a.do(ctx, http.MethodGet, "/admin/api/topology", nil, &ov)
			}
		}
		if err != nil {
			unreachable++
			continue
		}
		type key struct {
			topic, group, kind string
			part               uint32
		}
		theirs := map[key]int{}
		for i, p := range ov.Partitions {
			if p.Owner == n.ID {
				theirs[key{p.Topic, p.Group, p.Kind, p.Partition}] = i
			}
		}
		for i := range v.Partitions {
			p := &v.Partitions[i]
			j, ok := theirs[key{p.Topic, p.Group, p.Kind, p.Partition}]
			if p.Owner != n.ID || !ok {
				continue
			}
			for k := range p.Followers {
				for _, of := range ov.Partitions[j].Followers {
					if of.Node == p.Followers[k].Node {
						p.Followers[k].DurableNext, p.Followers[k].LagRecords = of.DurableNext, of.LagRecords
					}
				}
			}
		}
	}
	return unreachable
}

var errNoAdminAddr = errors.New("no admin address")

// printOwners prints one line per partition with its owner node, its
// followers (an asterisk marks the owner's recorded in-sync set; the
// durable tail and lag in records follow when the owner reported them)
// and the client endpoints a client would dial (`fibrilctl topology
// --owners`).
func printOwners(e *env, v *clusterView) error {
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tTOPIC\tGROUP\tPARTITION\tOWNER\tFOLLOWERS\tEPOCH\tWRITTEN\tCLIENT ENDPOINTS")
	for _, p := range v.Partitions {
		grp := p.Group
		if grp == "" {
			grp = "-"
		}
		owner := p.Owner
		switch {
		case owner == "":
			owner = "(unplaced)"
		case !p.OwnerLive:
			owner += " (dead)"
		}
		eps := strings.Join(p.Endpoints, ",")
		if eps == "" {
			eps = "(bootstrap)"
		}
		var fs []string
		for _, f := range p.Followers {
			name := f.Node
			if f.InSync {
				name += "*"
			}
			if f.DurableNext != nil && f.LagRecords != nil {
				name += fmt.Sprintf("(tail=%d,lag=%d)", *f.DurableNext, *f.LagRecords)
			}
			if !f.Live {
				name += "(dead)"
			}
			fs = append(fs, name)
		}
		followers := strings.Join(fs, ",")
		if followers == "" {
			followers = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%d\t%t\t%s\n", p.Kind, p.Topic, grp, p.Partition, owner, followers, p.Epoch, p.Written, eps)
	}
	return tw.Flush()
}

// runSettings is `fibrilctl settings get|set`: the runtime settings
// document (S-162; one per cluster in coordinated mode, S-173).
func runSettings(ctx context.Context, g *globals, e *env, args []string) error {
	fs := newFlagSet("settings", "get [--json] | set GROUP.KEY=VALUE ...", g, e)
	asJSON := fs.Bool("json", false, "settings get: print the whole answer as JSON")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("settings needs a subcommand: get or set GROUP.KEY=VALUE ...")
	}
	a, err := g.adminClient(e)
	if err != nil {
		return err
	}
	var cur struct {
		Version  uint64         `json:"version"`
		Settings map[string]any `json:"settings"`
	}
	if err := a.do(ctx, http.MethodGet, "/admin/api/runtime-settings", nil, &cur); err != nil {
		return err
	}
	switch pos[0] {
	case "get":
		if len(pos) > 1 {
			return usagef("settings get takes no argument")
		}
		if *asJSON {
			enc := json.NewEncoder(e.stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(cur)
		}
		fmt.Fprintf(e.stdout, "version %d\n", cur.Version)
		var lines []string
		for grp, kv := range cur.Settings {
			group, ok := kv.(map[string]any)
			if !ok {
				continue // the document's own version field
			}
			for k, v := range group {
				lines = append(lines, fmt.Sprintf("%s.%s = %v", grp, k, v))
			}
		}
		sort.Strings(lines)
		for _, l := range lines {
			fmt.Fprintln(e.stdout, l)
		}
		return nil
	case "set":
		if len(pos) < 2 {
			return usagef("settings set needs at least one GROUP.KEY=VALUE")
		}
		for _, kv := range pos[1:] {
			name, val, ok := strings.Cut(kv, "=")
			grp, key, ok2 := strings.Cut(name, ".")
			if !ok || !ok2 {
				return usagef("%q is not GROUP.KEY=VALUE", kv)
			}
			group, known := cur.Settings[grp].(map[string]any)
			if !known {
				return usagef("unknown settings group %q", grp)
			}
			prev, known := group[key]
			if !known {
				return usagef("unknown setting %s.%s", grp, key)
			}
			if _, isString := prev.(string); isString { // replication.durability: the broker checks the form
				group[key] = val
				continue
			}
			if _, isBool := prev.(bool); isBool { // routing.expose_private_endpoints
				b, err := strconv.ParseBool(val)
				if err != nil {
					return usagef("%s: %q is not true or false", name, val)
				}
				group[key] = b
				continue
			}
			n, err := strconv.ParseInt(val, 10, 64)
			if err != nil {
				return usagef("%s: %q is not an integer", name, val)
			}
			group[key] = n
		}
		delete(cur.Settings, "version")
		body := map[string]any{"expected_version": cur.Version, "settings": cur.Settings}
		var out struct {
			Version uint64 `json:"version"`
		}
		if err := a.do(ctx, http.MethodPut, "/admin/api/runtime-settings", body, &out); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "runtime settings now at version %d\n", out.Version)
		return nil
	}
	return usagef("unknown settings subcommand %q (get, set)", pos[0])
}
