package host

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fibrilgo/fibril/plugins"
)

const goodSHA = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08" // sha256("test")

func TestParseCatalog(t *testing.T) {
	data := `
[[plugin]]
kind = "coordination"
name = "etcd"
version = "1.2.0"
command = "bin/fibril-etcd"
args = ["--quiet", "-v"]
sha256 = "` + strings.ToUpper(goodSHA) + `"

[[plugin]]
kind = "transport"
name = "udp"
version = "0.1"
command = "/opt/udp"
sha256 = "` + goodSHA + `"
`
	c, err := ParseCatalog("/etc/fibril/plugins.toml", []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	e, ok := c.Lookup(plugins.KindCoordination, "etcd")
	if !ok {
		t.Fatal("etcd not found")
	}
	if e.Command != "/etc/fibril/bin/fibril-etcd" {
		t.Errorf("relative command resolved to %q", e.Command)
	}
	if e.SHA256 != goodSHA || strings.Join(e.Args, " ") != "--quiet -v" || e.Version != "1.2.0" {
		t.Errorf("entry %+v", e)
	}
	if _, ok := c.Lookup(plugins.KindCoordination, "udp"); ok {
		t.Error("lookup ignores the kind")
	}
	if got := c.Names(plugins.KindTransport); len(got) != 1 || got[0] != "udp" {
		t.Errorf("Names(transport) = %v", got)
	}
	var nilCat *Catalog
	if _, ok := nilCat.Lookup(plugins.KindCoordination, "etcd"); ok || nilCat.Names(plugins.KindCoordination) != nil {
		t.Error("a nil catalog is not empty")
	}
	if c, err := LoadCatalog(""); err != nil || len(c.Plugins) != 0 {
		t.Errorf("LoadCatalog(\"\") = %v, %v", c, err)
	}
}

func TestParseCatalogErrors(t *testing.T) {
	const file = "/etc/fibril/plugins.toml"
	for _, tc := range []struct {
		name, data string
		want       []string
	}{
		{"missing fields", "[[plugin]]\nname = \"x\"\n",
			[]string{file, "entry 1", "field kind: missing", "field version: missing", "field command: missing", "field sha256: missing"}},
		{"bad kind", "[[plugin]]\nkind = \"storage\"\nname = \"x\"\nversion = \"1\"\ncommand = \"/x\"\nsha256 = \"" + goodSHA + "\"\n",
			[]string{"entry 1", "field kind", `"storage" is not one of coordination, transport`}},
		{"bad name", "[[plugin]]\nkind = \"coordination\"\nname = \"My Plugin\"\nversion = \"1\"\ncommand = \"/x\"\nsha256 = \"" + goodSHA + "\"\n",
			[]string{"entry 1", "field name", `"My Plugin"`}},
		{"reserved name", "[[plugin]]\nkind = \"coordination\"\nname = \"none\"\nversion = \"1\"\ncommand = \"/x\"\nsha256 = \"" + goodSHA + "\"\n",
			[]string{`field name: "none" is reserved`}},
		{"bad sha", "[[plugin]]\nkind = \"coordination\"\nname = \"x\"\nversion = \"1\"\ncommand = \"/x\"\nsha256 = \"abc\"\n",
			[]string{`entry 1 (coordination "x"): field sha256: want 64 hex digits, got "abc"`}},
		{"duplicate", strings.Repeat("[[plugin]]\nkind = \"coordination\"\nname = \"x\"\nversion = \"1\"\ncommand = \"/x\"\nsha256 = \""+goodSHA+"\"\n", 2),
			[]string{`entry 2 (coordination "x"): field name: coordination plugin "x" is already defined by entry 1`}},
		{"unknown field", "[[plugin]]\nkind = \"coordination\"\nname = \"x\"\nversion = \"1\"\ncommand = \"/x\"\nsha = \"" + goodSHA + "\"\n",
			[]string{file, "line 6", `unknown field "plugin.sha"`}},
		{"unknown table", "[plugins]\nx = 1\n", []string{file, "line 1", `unknown field "plugins"`}},
		{"syntax", "[[plugin]\n", []string{file, "line 1"}},
		{"wrong type", "[[plugin]]\nargs = \"--x\"\n", []string{file, "line 2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseCatalog(file, []byte(tc.data))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestVerify(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "plugin")
	if err := os.WriteFile(bin, []byte("test"), 0o755); err != nil {
		t.Fatal(err)
	}
	data := "[[plugin]]\nkind = \"coordination\"\nname = \"x\"\nversion = \"1\"\ncommand = \"plugin\"\nsha256 = \"" + goodSHA + "\"\n"
	c, err := ParseCatalog(filepath.Join(dir, "catalog.toml"), []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	e := &c.Plugins[0]
	if err := e.Verify(); err != nil {
		t.Fatalf("Verify of a matching file: %v", err)
	}
	if err := os.WriteFile(bin, []byte("tampered"), 0o755); err != nil {
		t.Fatal(err)
	}
	err = e.Verify()
	if !errors.Is(err, ErrChecksumMismatch) {
		t.Fatalf("Verify of a changed file: %v", err)
	}
	got, _ := FileSHA256(bin)
	for _, w := range []string{bin, got, goodSHA, filepath.Join(dir, "catalog.toml")} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
	os.Remove(bin)
	if err := e.Verify(); err == nil || errors.Is(err, ErrChecksumMismatch) || !strings.Contains(err.Error(), bin) {
		t.Fatalf("Verify of a missing file: %v", err)
	}
}
