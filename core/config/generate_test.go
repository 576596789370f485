package config

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// The committed generated files live at the repository root.
var (
	examplePath = filepath.Join("..", "..", "fibril.example.toml")
	docsPath    = filepath.Join("..", "..", "docs", "configuration.md")
)

func TestExampleIsFresh(t *testing.T) {
	checkFresh(t, examplePath, WriteExample, RegenerateExample)
}

func TestDocsAreFresh(t *testing.T) {
	checkFresh(t, docsPath, WriteDocs, RegenerateDocs)
}

func checkFresh(t *testing.T, path string, write func(io.Writer) error, regen string) {
	t.Helper()
	var want bytes.Buffer
	if err := write(&want); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v; generate it with: %s (or go generate ./cmd/fibril)", err, regen)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Errorf("%s is stale: the key table changed since it was generated.\nRegenerate it from the repository root with:\n  %s\n(or: go generate ./cmd/fibril)\nfirst difference: %s",
			path, regen, firstDiff(string(got), want.String()))
	}
}

// firstDiff shows the first differing line, to make the failure readable.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d:\n  committed: %s\n  generated: %s", i+1, gl, wl)
		}
	}
	return "(none)"
}

// TestExampleLoads checks that the committed example loads cleanly, gives
// exactly the defaults, and sets every file-settable bootstrap key.
func TestExampleLoads(t *testing.T) {
	cfg, ld := mustLoad(t, []string{"--config", examplePath})
	if !reflect.DeepEqual(cfg, Defaults()) {
		t.Errorf("the example must equal the defaults:\n got %+v\nwant %+v", cfg, Defaults())
	}
	if len(ld.Warnings) != 0 {
		t.Errorf("the example warns: %v", ld.Warnings)
	}
	for _, k := range Keys() {
		listed := k.Class == Bootstrap && k.Allows(LayerFile) && k.Kind != KindUsers && k.Kind != KindOptBool
		if o := ld.Source(k.Name); listed != (o.Layer == LayerFile) {
			t.Errorf("%s: origin %v (listed in the example: %v)", k.Name, o, listed)
		}
	}
}

// tomlLine matches a commented-out TOML header or key = value line.
var tomlLine = regexp.MustCompile(`^(\[\[?[a-z_.]+\]\]?|[a-z_]+ = .*)$`)

// TestExampleCommentedParts checks that the commented runtime seeds and
// seed-user example are valid when uncommented.
func TestExampleCommentedParts(t *testing.T) {
	var b bytes.Buffer
	if err := WriteExample(&b); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	for _, want := range []string{"# [runtime_seed.delivery]", "# inflight_ttl_ms = 30000", "# [[auth.seed_users]]",
		"routing.max_upstream_sessions (4096)", "# admin_enabled = false"} {
		if !strings.Contains(text, want) {
			t.Errorf("example lacks %q", want)
		}
	}
	var uncommented []string
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, "# "); ok && tomlLine.MatchString(rest) {
			line = rest
		}
		uncommented = append(uncommented, line)
	}
	path := writeConfig(t, strings.Join(uncommented, "\n"))
	cfg, ld := mustLoad(t, []string{"--config", path})
	if len(cfg.Auth.SeedUsers) != 1 || ld.Source("runtime_seed.delivery.inflight_ttl_ms").Layer != LayerFile {
		t.Errorf("uncommented example not read: %+v", cfg.Auth)
	}
}
