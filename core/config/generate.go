package config

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// Generators for fibril.example.toml and docs/configuration.md. Both are
// derived from the key table and the rule list only, so a test can
// regenerate them and fail when the committed files are stale.

// Regeneration commands, quoted in the generated files and in test failures.
const (
	RegenerateExample = "go run ./cmd/fibril config example > fibril.example.toml"
	RegenerateDocs    = "go run ./cmd/fibril config docs > docs/configuration.md"
)

// section is a run of keys sharing a table path, in table order.
type section struct {
	path string
	keys []*Key
}

// sections groups keys by table path. Top-level groups keep the table's
// order; within one, parents come before children ([broker] before
// [broker.listener]). Table lists go last within their section so that
// uncommenting a [[…]] example cannot capture the keys written after it.
func sections(filter func(*Key) bool) []section {
	var out []section
	index := map[string]int{}   // section path -> position in out
	topRank := map[string]int{} // top-level name -> order of appearance
	for i := range keys {
		k := &keys[i]
		if !filter(k) {
			continue
		}
		if _, ok := topRank[topOf(k.Name)]; !ok {
			topRank[topOf(k.Name)] = len(topRank)
		}
		j, ok := index[k.Section()]
		if !ok {
			j = len(out)
			index[k.Section()] = j
			out = append(out, section{path: k.Section()})
		}
		out[j].keys = append(out[j].keys, k)
	}
	slices.SortStableFunc(out, func(a, b section) int {
		if d := topRank[topOf(a.path)] - topRank[topOf(b.path)]; d != 0 {
			return d
		}
		return strings.Count(a.path, ".") - strings.Count(b.path, ".")
	})
	for i := range out {
		slices.SortStableFunc(out[i].keys, func(a, b *Key) int {
			return boolRank(a.Kind == KindUsers) - boolRank(b.Kind == KindUsers)
		})
	}
	return out
}

// topOf returns the first part of a dotted path.
func topOf(path string) string {
	top, _, _ := strings.Cut(path, ".")
	return top
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// wrap breaks text into lines of at most width characters, each prefixed.
func wrap(prefix, text string, width int) string {
	var b strings.Builder
	line := prefix
	for _, w := range strings.Fields(text) {
		if len(line) > len(prefix) && len(line)+1+len(w) > width {
			b.WriteString(strings.TrimRight(line, " ") + "\n")
			line = prefix
		}
		if len(line) > len(prefix) {
			line += " "
		}
		line += w
	}
	b.WriteString(line + "\n")
	return b.String()
}

// mappings describes a key's environment variables and flags in one line.
func mappings(k *Key) string {
	var parts []string
	if len(k.Env) > 0 && k.Allows(LayerEnv) {
		p := "env " + k.Env[0]
		if len(k.Env) > 1 {
			p += " (legacy " + strings.Join(k.Env[1:], ", ") + ")"
		}
		parts = append(parts, p)
	}
	if k.Allows(LayerFlag) {
		fl := k.FlagNames()
		for i := range fl {
			fl[i] = "--" + fl[i]
		}
		parts = append(parts, "flag "+strings.Join(fl, ", "))
	}
	return strings.Join(parts, "; ")
}

// constraint describes a key's accepted values beyond its doc line.
func constraint(k *Key) string {
	var parts []string
	switch k.Kind {
	case KindEnum:
		parts = append(parts, "one of "+strings.Join(k.Enum, ", "))
	case KindInt:
		switch {
		case k.Min != nil && k.Max != nil:
			parts = append(parts, fmt.Sprintf("integer %d to %d", *k.Min, *k.Max))
		case k.Min != nil:
			parts = append(parts, fmt.Sprintf("integer ≥ %d", *k.Min))
		default:
			parts = append(parts, "integer")
		}
	default:
		parts = append(parts, k.Kind.String())
	}
	if k.Secret {
		parts = append(parts, "secret")
	}
	if k.Class != RuntimeOnly && !k.Allows(LayerFile) {
		parts = append(parts, "not in the file")
	}
	if k.Class != RuntimeOnly && !k.Allows(LayerEnv) && k.Allows(LayerFile) {
		parts = append(parts, "file only")
	}
	return strings.Join(parts, ", ")
}

// exampleValue renders a default for the example file, with a size note.
func exampleValue(k *Key) string {
	v := formatValue(k, k.Default)
	if n, ok := k.Default.(int64); ok && strings.HasSuffix(k.Name, "_bytes") {
		if h := humanSize(n); h != "" {
			v += "  # " + h
		}
	}
	return v
}

// exampleUser is the commented [[auth.seed_users]] entry of the example.
// The hash is a syntactically valid placeholder, not a usable password.
const exampleUser = `# [[auth.seed_users]]
# username = "app"
# password_hash = "$argon2id$v=19$m=65536,t=3,p=4$c2FsdHNhbHRzYWx0$aGFzaGhhc2hoYXNoaGFzaGhhc2hoYXNoaGFzaA"
`

// WriteExample writes fibril.example.toml: every bootstrap key with its
// default and description, the runtime seeds commented out, and a note
// about the routing.* and replication.* runtime settings. The file loads as is.
func WriteExample(w io.Writer) error {
	var b strings.Builder
	b.WriteString(`# Fibril broker configuration: every bootstrap key with its built-in default.
#
# Generated from core/config/keys.go; do not edit. Regenerate with:
#   ` + RegenerateExample + `
# The full reference is docs/configuration.md.
#
# Precedence, lowest first: built-in defaults < this file (--config PATH or
# FIBRIL_CONFIG) < FIBRIL_* environment variables < command-line flags.
# Secrets (the cluster secret, the admin password, plain user passwords) are
# never read from a config file: set them in the environment (each secret
# variable also has a _FILE form naming a file that holds it, e.g.
# FIBRIL_AUTH_PASSWORD_FILE=/run/secrets/app) or point a *_path / *_file
# key at a file holding them.
`)
	for _, s := range sections(func(k *Key) bool { return k.Class == Bootstrap }) {
		writeExampleSection(&b, s, false)
	}

	b.WriteString(`
# ---------------------------------------------------------------------------
# Runtime seeds. The delivery, connection and partitioning groups live in the
# cluster's runtime settings document. These values seed that document only
# when none exists yet; afterwards the document wins on every boot, so a
# changed seed has no effect on an existing cluster.
# Uncomment to change a seed.
# ---------------------------------------------------------------------------
`)
	for _, s := range sections(func(k *Key) bool { return k.Class == RuntimeSeed }) {
		writeExampleSection(&b, s, true)
	}

	var routing []string
	for i := range keys {
		if k := &keys[i]; k.Class == RuntimeOnly {
			routing = append(routing, k.Name+" ("+formatValue(k, k.Default)+")")
		}
	}
	b.WriteString("\n")
	b.WriteString(wrap("# ", "The routing and replication settings "+strings.Join(routing, ", ")+
		" are runtime settings with built-in defaults and no boot seed: they cannot be set in this file,"+
		" the environment or flags, only through the cluster's runtime settings document.", 78))
	_, err := io.WriteString(w, b.String())
	return err
}

// writeExampleSection writes one [section]; commented writes every line
// as a comment.
func writeExampleSection(b *strings.Builder, s section, commented bool) {
	lead := ""
	if commented {
		lead = "# "
	}
	fileKeys := 0
	for _, k := range s.keys {
		if k.Allows(LayerFile) && k.Kind != KindUsers {
			fileKeys++
		}
	}
	b.WriteString("\n")
	if fileKeys > 0 {
		b.WriteString(lead + "[" + s.path + "]\n")
	} else {
		b.WriteString("# [" + s.path + "] has no keys for this file.\n")
	}
	for i, k := range s.keys {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString(wrap("# ", k.Doc, 78))
		if m := mappings(k); m != "" && k.Allows(LayerFile) {
			b.WriteString(wrap("# ", m+".", 78))
		}
		switch {
		case k.Kind == KindUsers:
			b.WriteString("# Example (the hash is a placeholder):\n" + exampleUser)
		case !k.Allows(LayerFile):
			b.WriteString(wrap("# ", k.Leaf()+": not settable in this file; "+k.refusal(LayerFile)+".", 78))
		case k.Kind == KindOptBool:
			b.WriteString("# Default: " + k.DefaultNote + ".\n")
			b.WriteString("# " + k.Leaf() + " = false\n")
		default:
			if k.DefaultNote != "" {
				b.WriteString(wrap("# ", "Default: "+k.DefaultNote+".", 78))
			}
			b.WriteString(lead + k.Leaf() + " = " + exampleValue(k) + "\n")
		}
	}
}

// sectionDocs introduces each top-level section in the docs.
var sectionDocs = map[string]string{
	"server":       "Node-local paths.",
	"broker":       "The Fibril client listener, how peers reach this broker, public or private visibility, and frame limits.",
	"admin":        "The admin HTTP listener (health, readiness, metrics, admin API, dashboard) and its login.",
	"storage":      "Partition logs and durability: when a confirmed publish is on disk (see core/storage/README.md).",
	"auth":         "Broker users. Users are seeded only while the user store is empty; afterwards the store owns them, and changes go through the admin API.",
	"tls":          "Certificates for the broker listener, the admin listener and inter-broker connections. No certificate ships with the product: supply one or let the broker generate a CA.",
	"coordination": "Standalone or coordinated mode, node identity, the cluster secret, liveness and the embedded raft backend.",
	"transport":    "How brokers reach each other.",
	"plugins":      "External plugins.",
	"log":          "Logging (log/slog).",
	"runtime_seed": "Seeds of the runtime settings document: used only when the cluster has no document yet; afterwards the document wins and changes go through the admin API.",
	"replication":  "How many copies of each partition the cluster keeps and when a replicated publish is confirmed. Runtime settings with built-in defaults and no boot seed, like routing; a standalone broker ignores them.",
	"routing":      "Forwarding limits (see core/forward/README.md), how long a declaration waits for its partitions to be placed, and whether topology answers list private owners' own addresses for internal clients (see core/routing/README.md). Runtime settings with built-in defaults and no boot seed: setting them at boot is an error; they change through the runtime settings document.",
}

// mdCell escapes text for a Markdown table cell.
func mdCell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}

// WriteDocs writes docs/configuration.md.
func WriteDocs(w io.Writer) error {
	var b strings.Builder
	b.WriteString("<!-- Generated from core/config; do not edit. Regenerate with: " + RegenerateDocs + " -->\n\n")
	b.WriteString("# Configuration\n\n")
	b.WriteString("Regenerate this file with `" + RegenerateDocs + "` (or `go generate ./cmd/fibril`); a test fails when it is stale.\n")
	b.WriteString(docsIntro)

	var current string
	for _, s := range sections(func(*Key) bool { return true }) {
		if top := topOf(s.path); top != current {
			current = top
			b.WriteString("\n## `" + top + "`\n\n" + sectionDocs[top] + "\n")
		}
		if s.path != current {
			b.WriteString("\n### `[" + s.path + "]`\n")
		}
		b.WriteString("\n")
		b.WriteString("| Key | Env | Flag | Default | Class | Description |\n|---|---|---|---|---|---|\n")
		for _, k := range s.keys {
			env := "—"
			if len(k.Env) > 0 && k.Allows(LayerEnv) {
				env = "`" + k.Env[0] + "`"
				if len(k.Env) > 1 {
					env += " (legacy `" + strings.Join(k.Env[1:], "`, `") + "`)"
				}
			}
			flags := "—"
			if k.Allows(LayerFlag) {
				fl := k.FlagNames()
				for i := range fl {
					fl[i] = "`--" + fl[i] + "`"
				}
				flags = strings.Join(fl, ", ")
			}
			def := "`" + formatValue(k, k.Default) + "`"
			if n, ok := k.Default.(int64); ok && strings.HasSuffix(k.Name, "_bytes") {
				if h := humanSize(n); h != "" {
					def += " (" + h + ")"
				}
			}
			if k.DefaultNote != "" {
				def += " — " + k.DefaultNote
			}
			if k.Kind == KindOptBool || k.Kind == KindUsers {
				def = k.DefaultNote
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s |\n", k.Name, mdCell(env), mdCell(flags),
				mdCell(def), k.Class, mdCell(k.Doc+" *("+constraint(k)+")*"))
		}
	}

	b.WriteString("\n## Cross-key rules\n\nChecked after the layers are merged; each error names every key involved with its value and origin.\n\n")
	for _, r := range rules {
		prefix := ""
		if r.Warn {
			prefix = "(warning) "
		}
		b.WriteString("- " + prefix + r.Doc + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// docsIntro is the hand-written part of the reference; it describes the
// loader's behaviour, which is code, not table rows.
const docsIntro = `
Every key is described once, in the key table of ` + "`core/config/keys.go`" + `; this
page, ` + "`fibril.example.toml`" + ` and ` + "`fibril config print`" + ` are generated from it.

## Where values come from

Lowest precedence first; a later layer overrides an earlier one key by key:

1. **Built-in defaults** (the tables below).
2. **The TOML file** named by ` + "`--config PATH`" + ` or ` + "`FIBRIL_CONFIG`" + ` (the flag wins; ` + "`--config=\"\"`" + `
   means no file). Without either, no file is read.
3. **Environment variables**. Each key lists its variable explicitly; names do
   not follow the key mechanically (` + "`FIBRIL_BROKER_BIND`" + ` is ` + "`broker.listener.bind`" + `).
   An empty variable counts as unset. Lists are comma-separated and trimmed.
   Booleans accept true/false, 1/0, yes/no, on/off. Where a key has a legacy
   variable too, the first one listed wins.
4. **Command-line flags**: ` + "`--<key> value`" + ` or ` + "`--<key>=value`" + `; booleans also as a bare
   ` + "`--<key>`" + ` (write ` + "`--<key>=false`" + ` to turn one off). A repeated list flag adds entries,
   and each value may itself be comma-separated.

Unknown keys in the file, unknown flags, values of the wrong type and
invalid values stop startup. All problems are reported at once, each naming
the key and where its value came from: ` + "`fibril.toml:12`" + `, ` + "`env FIBRIL_BROKER_BIND`" + `,
` + "`flag --broker.listener.bind`" + ` or ` + "`default`" + `. Unknown ` + "`FIBRIL_*`" + ` variables only warn,
because client SDKs in the same container share the prefix; a name within two
edits of a known one is called out as a likely typo.

**Secrets** (the cluster secret, the admin password, plain user passwords)
are never read from the file, nor from flags (command lines are visible to
other local users): they come from the environment, or from a file named by
` + "`coordination.secret_path`" + ` / ` + "`admin.auth.password_file`" + `. Every secret variable also has a
` + "`_FILE`" + ` form that names a file holding the secret, the way Docker and Kubernetes hand secrets
to a process (` + "`FIBRIL_AUTH_PASSWORD_FILE=/run/secrets/app`" + `, ` + "`FIBRIL_CLUSTER_SECRET_FILE`" + `,
` + "`FIBRIL_CONSUL_TOKEN_FILE`" + `); the file's final line break is not part of it, and setting both forms
is an error. A secret key in the file is an error that says so.

## Classes

- **bootstrap**: read at start; a change needs a restart.
- **runtime seed**: seeds the cluster-wide runtime settings document only when
  none exists yet; afterwards the persisted document wins on every boot, so a
  changed seed has no effect once the document exists.
- **runtime (no boot seed)**: a runtime setting with a built-in default that
  cannot be set at boot at all; it changes through the runtime settings
  document. Setting one in the file, the environment or a flag is an error.
`
