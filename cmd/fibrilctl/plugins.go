package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/fibrilgo/fibril/plugins"
	"github.com/fibrilgo/fibril/plugins/host"
)

// pluginRow is one line of `plugins list`.
type pluginRow struct {
	Kind    string   `json:"kind"`
	Name    string   `json:"name"`
	Source  string   `json:"source"` // builtin | catalog
	Version string   `json:"version,omitempty"`
	Package string   `json:"package,omitempty"`
	Command string   `json:"command,omitempty"`
	Args    []string `json:"args,omitempty"`
	SHA256  string   `json:"sha256,omitempty"`
	// Status is, for a catalog entry, "ok", "mismatch" or "unreadable"
	// (the binary's digest against the catalog's), and "shadowed" when a
	// built-in of the same name wins.
	Status string `json:"status"`
	Detail string `json:"detail,omitempty"`
}

func runPlugins(ctx context.Context, g *globals, e *env, args []string) error {
	fs := newFlagSet("plugins", "list [--catalog FILE] [--json] | describe PATH [--json] [-- PLUGIN ARGS...]", g, e)
	catalog := fs.String("catalog", e.getenv("FIBRIL_PLUGINS_CATALOG"), "plugins list: the external plugin catalog `FILE` (env FIBRIL_PLUGINS_CATALOG; the broker's plugins.catalog)")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("plugins needs a subcommand: list or describe PATH")
	}
	switch pos[0] {
	case "list", "ls":
		if len(pos) > 1 {
			return usagef("plugins list takes no argument (the catalog is --catalog FILE)")
		}
		return pluginsList(e, *catalog, *asJSON)
	case "describe":
		if len(pos) < 2 {
			return usagef("plugins describe needs the PATH of a plugin binary")
		}
		dctx, cancel := context.WithTimeout(ctx, g.timeout)
		defer cancel()
		return pluginsDescribe(dctx, e, pos[1], pos[2:], *asJSON)
	}
	return usagef("unknown plugins subcommand %q (list, describe)", pos[0])
}

// pluginsList prints the built-ins plugins.toml compiles into fibril and
// the entries of the catalog, verifying each catalog binary's sha256 as the
// broker would before launching it. A catalog that would not work (a
// mismatch, a missing binary) makes the command fail after printing, so it
// doubles as a check in deployment scripts.
func pluginsList(e *env, catalogPath string, asJSON bool) error {
	cat, err := host.LoadCatalog(catalogPath)
	if err != nil {
		return err
	}
	var rows []pluginRow
	builtin := map[string]bool{}
	for _, b := range host.DeclaredBuiltins() {
		builtin[b.Kind+"/"+b.Name] = true
		rows = append(rows, pluginRow{Kind: b.Kind, Name: b.Name, Source: "builtin", Package: b.Package, Status: "ok"})
	}
	// Built-ins linked into this binary but not declared (none in a
	// normal build) are shown too.
	for _, n := range plugins.BuiltinCoordinationNames() {
		if !builtin[plugins.KindCoordination+"/"+n] {
			builtin[plugins.KindCoordination+"/"+n] = true
			rows = append(rows, pluginRow{Kind: plugins.KindCoordination, Name: n, Source: "builtin", Status: "ok"})
		}
	}
	failed := 0
	for _, c := range cat.Plugins {
		r := pluginRow{Kind: c.Kind, Name: c.Name, Source: "catalog", Version: c.Version, Command: c.Command, Args: c.Args, SHA256: c.SHA256}
		got, err := c.FileSHA256()
		switch {
		case err != nil:
			r.Status, r.Detail = "unreadable", err.Error()
			failed++
		case got != c.SHA256:
			r.Status, r.Detail = "mismatch", "the file's sha256 is "+got
			failed++
		case builtin[c.Kind+"/"+c.Name]:
			r.Status, r.Detail = "shadowed", "a built-in has this name and is used instead"
		default:
			r.Status = "ok"
		}
		rows = append(rows, r)
	}
	slices.SortStableFunc(rows, func(a, b pluginRow) int {
		return strings.Compare(a.Kind+"\x00"+a.Name, b.Kind+"\x00"+b.Name)
	})
	if asJSON {
		if rows == nil {
			rows = []pluginRow{}
		}
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(map[string]any{"catalog": cat.Path, "plugins": rows}); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "KIND\tNAME\tSOURCE\tVERSION\tCOMMAND\tSHA256")
		for _, r := range rows {
			version, command, sum := r.Version, r.Command, r.Status
			if r.Source == "builtin" {
				version, command, sum = "-", "(built in: "+r.Package+")", "-"
				if r.Package == "" {
					command = "(built in)"
				}
			} else {
				if len(r.Args) > 0 {
					command += " " + strings.Join(r.Args, " ")
				}
				if r.Detail != "" {
					sum += ": " + r.Detail
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Kind, r.Name, r.Source, version, command, sum)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if cat.Path == "" {
			fmt.Fprintln(e.stdout, "(no catalog: give --catalog FILE or set FIBRIL_PLUGINS_CATALOG to list external plugins)")
		}
	}
	if failed > 0 {
		entries := "entries"
		if failed == 1 {
			entries = "entry"
		}
		return fmt.Errorf("%d catalog %s would be refused by the broker (see the SHA256 column)", failed, entries)
	}
	return nil
}

// pluginsDescribe launches the binary, asks PluginInfo and prints it.
func pluginsDescribe(ctx context.Context, e *env, path string, args []string, asJSON bool) error {
	info, err := host.Describe(ctx, path, args, nil)
	if err != nil {
		return err
	}
	sum, err := host.FileSHA256(path)
	if err != nil {
		return err
	}
	broker := plugins.APIVersions(info.Kind)
	var common []int
	for _, v := range info.APIVersions {
		if slices.Contains(broker, v) {
			common = append(common, v)
		}
	}
	if asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{
			"name": info.Name, "kind": info.Kind, "version": info.Version,
			"api_versions": info.APIVersions, "broker_api_versions": nonNil(broker), "compatible": len(common) > 0,
			"sdk_version": info.SDKVersion, "config": nonNilKeys(info.Config),
			"sha256": sum, "sha256_verified": false,
		})
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "name:\t%s\n", info.Name)
	fmt.Fprintf(tw, "kind:\t%s\n", info.Kind)
	fmt.Fprintf(tw, "version:\t%s\n", info.Version)
	compat := fmt.Sprintf("compatible: this fibril uses API version %d", slices.Max(append([]int{0}, common...)))
	if len(common) == 0 {
		compat = fmt.Sprintf("INCOMPATIBLE: this fibril speaks %s API versions %v", info.Kind, broker)
	}
	fmt.Fprintf(tw, "API versions:\t%v (%s)\n", info.APIVersions, compat)
	fmt.Fprintf(tw, "SDK version:\t%s\n", info.SDKVersion)
	fmt.Fprintf(tw, "sha256:\t%s (not verified: no catalog was given; put it in the plugin's catalog entry)\n", sum)
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(info.Config) == 0 {
		fmt.Fprintln(e.stdout, "config: (no keys)")
		return nil
	}
	prefix := ""
	switch info.Kind {
	case plugins.KindCoordination:
		prefix = "coordination.<name>."
	case plugins.KindTransport:
		prefix = "transport.<name>."
	}
	fmt.Fprintf(e.stdout, "config (keys %s*):\n", prefix)
	tw = tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  KEY\tTYPE\tDEFAULT\tREQUIRED\tDOC")
	for _, k := range info.Config {
		def := k.Default
		if def == "" {
			def = "-"
		}
		req := "no"
		if k.Required {
			req = "yes"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", k.Name, k.Type, def, req, k.Doc)
	}
	return tw.Flush()
}

func nonNil(v []int) []int {
	if v == nil {
		return []int{}
	}
	return v
}

func nonNilKeys(v []plugins.ConfigKey) []plugins.ConfigKey {
	if v == nil {
		return []plugins.ConfigKey{}
	}
	return v
}
