package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGeneratedFilesMatchPluginsToml fails when cmd/fibril/plugins_gen.go
// or plugins/host/builtins_gen.go is not what plugins.toml generates: someone
// edited one without running `go generate ./cmd/fibril`.
func TestGeneratedFilesMatchPluginsToml(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	tomlPath := filepath.Join(root, "plugins.toml")
	data, err := os.ReadFile(tomlPath)
	if err != nil {
		t.Fatal(err)
	}
	list, err := parse(tomlPath, data)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		path   string
		render func([]builtin) ([]byte, error)
	}{
		{filepath.Join(root, "cmd", "fibril", "plugins_gen.go"), renderImports},
		{filepath.Join(root, "plugins", "host", "builtins_gen.go"), renderTable},
	} {
		want, err := f.render(list)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(f.path)
		if err != nil {
			t.Fatalf("%v (run `go generate ./cmd/fibril`)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s disagrees with plugins.toml; run `go generate ./cmd/fibril`.\nwant:\n%s\ngot:\n%s", f.path, want, got)
		}
	}
}

func TestParse(t *testing.T) {
	list, err := parse("p.toml", []byte(`
[[builtin]]
kind = "transport"
name = "tcp"
package = "example.com/x/transport/tcp"

[[builtin]]
kind = "coordination"
name = "raft"
package = "example.com/x/coordination/raft"
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "raft" || list[1].Name != "tcp" {
		t.Fatalf("not sorted by kind and name: %+v", list)
	}
	src, err := renderImports(list)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(src), `_ "example.com/x/coordination/raft"`) || !strings.Contains(string(src), "DO NOT EDIT.") {
		t.Fatalf("imports:\n%s", src)
	}
	if src, err := renderImports(nil); err != nil || strings.Contains(string(src), "import (") {
		t.Fatalf("empty list renders %q, %v", src, err)
	}

	for _, tc := range []struct{ data, want string }{
		{"[[builtin]]\nkind = \"storage\"\nname = \"x\"\npackage = \"a/b\"\n", "builtin entry 1: field kind"},
		{"[[builtin]]\nkind = \"coordination\"\nname = \"X Y\"\npackage = \"a/b\"\n", "builtin entry 1: field name"},
		{"[[builtin]]\nkind = \"coordination\"\nname = \"x\"\npackage = \"not a path\"\n", "builtin entry 1: field package"},
		{strings.Repeat("[[builtin]]\nkind = \"coordination\"\nname = \"x\"\npackage = \"a/b\"\n", 2), "builtin entry 2: field name"},
		{"[[builtin]]\nkind = \"coordination\"\nnme = \"x\"\n", "unknown field"},
	} {
		if _, err := parse("p.toml", []byte(tc.data)); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "p.toml") {
			t.Errorf("%q: error %v, want %q", tc.data, err, tc.want)
		}
	}
}
