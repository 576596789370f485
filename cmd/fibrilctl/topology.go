package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/fibrilgo/fibril/core/client"
)

type partitionJSON struct {
	Topic               string   `json:"topic"`
	Group               string   `json:"group,omitempty"`
	Partition           uint32   `json:"partition"`
	PartitionCount      uint32   `json:"partition_count"`
	PartitioningVersion uint64   `json:"partitioning_version"`
	Owners              []string `json:"owners"`
}

type topologyJSON struct {
	Generation uint64          `json:"generation"`
	Queues     []partitionJSON `json:"queues"`
	Streams    []partitionJSON `json:"streams"`
}

func runTopology(ctx context.Context, g *globals, e *env, args []string) error {
	fs := newFlagSet("topology", "[--topic T] [--owners] [--json]", g, e)
	topic := fs.String("topic", "", "only this topic (default: all)")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	withOwners := fs.Bool("owners", false, "one line per partition with its owner node, followers (* in sync; durable tail and lag, asked of each owner's admin API), epoch, written mark and the client endpoints a client would dial, from the admin API at --admin (cluster only)")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	if *withOwners {
		v, err := fetchCluster(ctx, g, e)
		if err != nil {
			return err
		}
		if *topic != "" {
			kept := v.Partitions[:0]
			for _, p := range v.Partitions {
				if p.Topic == *topic {
					kept = append(kept, p)
				}
			}
			v.Partitions = kept
		}
		unreachable := fillTails(ctx, g, e, v)
		if *asJSON {
			enc := json.NewEncoder(e.stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(v.Partitions)
		}
		if err := printOwners(e, v); err != nil {
			return err
		}
		if unreachable > 0 {
			fmt.Fprintf(e.stdout, "\n%d owner(s) did not answer on their admin address: their followers' tails are not shown\n", unreachable)
		}
		return nil
	}
	c, err := g.dial(ctx, e)
	if err != nil {
		return err
	}
	defer c.Close()
	rctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	t, err := c.Topology(rctx, *topic)
	if err != nil {
		return fmt.Errorf("topology: %w", err)
	}
	out := topologyJSON{Generation: t.Generation, Queues: convert(t.Queues), Streams: convert(t.Streams)}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	fmt.Fprintf(e.stdout, "generation %d\n", t.Generation)
	if len(out.Queues)+len(out.Streams) == 0 {
		fmt.Fprintln(e.stdout, "no queues or streams listed (a standalone broker lists none)")
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tTOPIC\tGROUP\tPARTITION\tCOUNT\tVERSION\tOWNERS")
	row := func(kind string, p partitionJSON) {
		grp := p.Group
		if grp == "" {
			grp = "-"
		}
		owners := strings.Join(p.Owners, ",")
		if owners == "" {
			owners = "(unknown)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\n", kind, p.Topic, grp, p.Partition, p.PartitionCount, p.PartitioningVersion, owners)
	}
	for _, p := range out.Queues {
		row("queue", p)
	}
	for _, p := range out.Streams {
		row("stream", p)
	}
	return tw.Flush()
}

func convert(in []client.PartitionInfo) []partitionJSON {
	out := make([]partitionJSON, 0, len(in))
	for _, p := range in {
		owners := p.Owners
		if owners == nil {
			owners = []string{}
		}
		out = append(out, partitionJSON{
			Topic: p.Topic, Group: p.Group, Partition: p.Partition, PartitionCount: p.PartitionCount,
			PartitioningVersion: p.PartitioningVersion, Owners: owners,
		})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		if a.Group != b.Group {
			return a.Group < b.Group
		}
		return a.Partition < b.Partition
	})
	return out
}
