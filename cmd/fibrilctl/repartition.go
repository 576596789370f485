package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// runRepartition is `fibrilctl repartition`: POST /admin/api/repartition
// {topic, group?, partition_count} (docs/repartition.md, S-122). The
// broker starts the transition and answers at once; it runs in the
// background.
func runRepartition(ctx context.Context, g *globals, e *env, args []string) error {
	fs := newFlagSet("repartition", "--topic T [--group G] --partitions N [--json]", g, e)
	topic := fs.String("topic", "", "the queue's topic")
	group := fs.String("group", "", "the queue's group (default: the default group)")
	partitions := fs.Uint("partitions", 0, "the new partition count: a multiple of the current one (grow) or a divisor of it (shrink)")
	asJSON := fs.Bool("json", false, "print the broker's answer as JSON")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	if *topic == "" {
		return usagef("repartition needs --topic")
	}
	if *partitions == 0 || uint64(*partitions) > 1<<32-1 {
		return usagef("repartition needs --partitions N, a partition count of at least 1")
	}
	a, err := g.adminClient(e)
	if err != nil {
		return err
	}
	body := map[string]any{"topic": *topic, "partition_count": uint32(*partitions)}
	if *group != "" {
		body["group"] = *group
	}
	var raw json.RawMessage
	if err := a.do(ctx, http.MethodPost, "/admin/api/repartition", body, &raw); err != nil {
		return err
	}
	if *asJSON {
		return printIndented(e, raw)
	}
	var out struct {
		Status         string `json:"status"`
		PartitionCount uint32 `json:"partition_count"`
		From           uint32 `json:"from"`
		To             uint32 `json:"to"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return fmt.Errorf("admin API: malformed answer: %w", err)
	}
	name := "queue " + *topic
	if *group != "" {
		name += " (group " + *group + ")"
	}
	switch out.Status {
	case "started":
		fmt.Fprintf(e.stdout, "started: %s from %d to %d partitions\n", name, out.From, out.To)
		fmt.Fprintf(e.stdout, "it runs in the background; 'fibrilctl topology --owners --topic %s' shows its partitions as they are placed\n", *topic)
	case "unchanged":
		fmt.Fprintf(e.stdout, "unchanged: %s already has %d partitions\n", name, out.PartitionCount)
	default:
		fmt.Fprintf(e.stdout, "%s: %s\n", out.Status, name)
	}
	return nil
}
