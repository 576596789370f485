package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fibrilgo/fibril/plugins/host"
)

// buildTestPlugin builds the plugins package's test plugin into the
// test's temporary directory (the build cache makes the second build
// cheap).
func buildTestPlugin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "testplugin")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/fibrilgo/fibril/plugins/internal/testplugin").CombinedOutput()
	if err != nil {
		t.Fatalf("build test plugin: %v\n%s", err, out)
	}
	return bin
}

func TestPluginsDescribe(t *testing.T) {
	bin := buildTestPlugin(t)
	r := ctl(t, "", "plugins", "describe", bin, "--", "--name=demo", "--version=2.0.0")
	mustOK(t, r, "plugins describe")
	sum, err := host.FileSHA256(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"name:", "demo", "kind:", "coordination", "2.0.0", "[1] (compatible: this fibril uses API version 1)",
		sum, "not verified", "coordination.<name>.*", "socket", "min_ttl_ms", "50"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("describe output lacks %q:\n%s", want, r.stdout)
		}
	}

	r = ctl(t, "", "plugins", "describe", "--json", bin, "--", "--api-versions=7")
	mustOK(t, r, "plugins describe --json")
	var out struct {
		Name        string `json:"name"`
		APIVersions []int  `json:"api_versions"`
		Compatible  bool   `json:"compatible"`
		SHA256      string `json:"sha256"`
		Verified    bool   `json:"sha256_verified"`
		Config      []struct {
			Name string `json:"name"`
		} `json:"config"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("%v: %s", err, r.stdout)
	}
	if out.Name != "testplugin" || len(out.APIVersions) != 1 || out.APIVersions[0] != 7 || out.Compatible || out.SHA256 != sum || out.Verified || len(out.Config) != 2 {
		t.Fatalf("describe --json = %+v", out)
	}

	if r := ctl(t, "", "plugins", "describe"); r.code != exitUsage {
		t.Fatalf("describe without PATH: exit %d", r.code)
	}
	if r := ctl(t, "", "plugins", "describe", filepath.Join(t.TempDir(), "missing")); r.code != exitFail {
		t.Fatalf("describe of a missing file: exit %d: %s", r.code, r.stderr)
	}
}

func TestPluginsList(t *testing.T) {
	bin := buildTestPlugin(t)
	sum, err := host.FileSHA256(bin)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	catalog := filepath.Join(dir, "catalog.toml")
	good := `[[plugin]]
kind = "coordination"
name = "mem"
version = "0.0.1"
command = "` + bin + `"
args = ["--name=mem"]
sha256 = "` + sum + `"
`
	if err := os.WriteFile(catalog, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	r := ctl(t, "", "plugins", "list", "--catalog", catalog)
	mustOK(t, r, "plugins list")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if !strings.HasPrefix(lines[0], "KIND") || !strings.Contains(r.stdout, "--name=mem") {
		t.Fatalf("list output:\n%s", r.stdout)
	}
	var memLine string
	for _, l := range lines {
		if strings.Contains(l, " mem ") {
			memLine = l
		}
	}
	for _, want := range []string{"coordination", "catalog", "0.0.1", bin, "ok"} {
		if !strings.Contains(memLine, want) {
			t.Errorf("catalog line %q lacks %q", memLine, want)
		}
	}
	for _, b := range host.DeclaredBuiltins() {
		if !strings.Contains(r.stdout, b.Name) || !strings.Contains(r.stdout, b.Package) {
			t.Errorf("built-in %s missing:\n%s", b.Name, r.stdout)
		}
	}

	// A wrong digest is shown and fails the command; JSON carries it too.
	bad := strings.Replace(good, sum, strings.Repeat("0", 64), 1)
	if err := os.WriteFile(catalog, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	r = ctl(t, "", "plugins", "list", "--json", "--catalog", catalog)
	if r.code != exitFail || !strings.Contains(r.stderr, "1 catalog entry would be refused") {
		t.Fatalf("list with a mismatch: exit %d\n%s", r.code, r.stderr)
	}
	var out struct {
		Catalog string      `json:"catalog"`
		Plugins []pluginRow `json:"plugins"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("%v: %s", err, r.stdout)
	}
	found := false
	for _, p := range out.Plugins {
		if p.Name == "mem" {
			found = true
			if p.Status != "mismatch" || !strings.Contains(p.Detail, sum) {
				t.Errorf("mismatch row %+v", p)
			}
		}
	}
	if !found || out.Catalog != catalog {
		t.Fatalf("list --json = %+v", out)
	}

	// Without a catalog: the built-ins and a hint.
	r = ctl(t, "", "plugins", "list")
	mustOK(t, r, "plugins list without catalog")
	if !strings.Contains(r.stdout, "no catalog") {
		t.Errorf("no hint about --catalog:\n%s", r.stdout)
	}
	// A malformed catalog names the file, the entry and the field.
	if err := os.WriteFile(catalog, []byte("[[plugin]]\nkind = \"coordination\"\nname = \"x\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = ctl(t, "", "plugins", "list", "--catalog", catalog)
	if r.code != exitFail || !strings.Contains(r.stderr, catalog) || !strings.Contains(r.stderr, "field sha256") {
		t.Fatalf("malformed catalog: exit %d\n%s", r.code, r.stderr)
	}
	if r := ctl(t, "", "plugins", "frobnicate"); r.code != exitUsage {
		t.Fatalf("unknown subcommand: exit %d", r.code)
	}
}
