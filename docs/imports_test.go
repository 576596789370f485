package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const module = "github.com/fibrilgo/fibril/"

// notOnTheMap are packages with code that the map leaves out on purpose:
// test-only homes.
var notOnTheMap = map[string]bool{
	"integration": true, // the multi-process tests; its one file is a doc comment
	"docs":        true, // this test
}

var backticked = regexp.MustCompile("`([^`]+)`")

// importRule is one row of the package table in ARCHITECTURE.md: the
// packages it describes and the module packages they may import. A path
// ending in "/…" stands for everything below it.
type importRule struct {
	line     int
	packages []string
	allowed  []string
}

func matches(patterns []string, pkg string) bool {
	for _, p := range patterns {
		if prefix, ok := strings.CutSuffix(p, "/…"); ok {
			if strings.HasPrefix(pkg, prefix+"/") {
				return true
			}
		} else if p == pkg {
			return true
		}
	}
	return false
}

// importRules reads the table under "## Packages" in ARCHITECTURE.md.
func importRules(t *testing.T, root string) []importRule {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "docs", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	var rules []importRule
	in := false
	for i, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "#") {
			in = line == "## Packages"
			continue
		}
		if !in || !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(line, " | ")
		r := importRule{line: i + 1}
		for _, m := range backticked.FindAllStringSubmatch(cells[0], -1) {
			r.packages = append(r.packages, m[1])
		}
		for _, m := range backticked.FindAllStringSubmatch(cells[len(cells)-1], -1) {
			r.allowed = append(r.allowed, m[1])
		}
		rules = append(rules, r)
	}
	if len(rules) == 0 {
		t.Fatal("docs/ARCHITECTURE.md: no package table under ## Packages")
	}
	return rules
}

// TestImportMap keeps the package map in ARCHITECTURE.md true: every
// package of the module with code is on it, and imports only module
// packages its row allows.
func TestImportMap(t *testing.T) {
	root, _ := repo(t)
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to list the packages")
	}
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}} {{len .GoFiles}} {{join .Imports \" \"}}", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	rules := importRules(t, root)
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], module)
		if fields[0] == strings.TrimSuffix(module, "/") {
			pkg = ""
		}
		if fields[1] == "0" || notOnTheMap[pkg] {
			continue // tests only
		}
		var rule *importRule
		for i := range rules {
			if matches(rules[i].packages, pkg) {
				rule = &rules[i]
				break
			}
		}
		if rule == nil {
			t.Errorf("%s is not on the package map in docs/ARCHITECTURE.md", pkg)
			continue
		}
		for _, imp := range fields[2:] {
			dep, ok := strings.CutPrefix(imp, module)
			if !ok || dep == pkg {
				continue
			}
			if !matches(rule.allowed, dep) {
				t.Errorf("%s imports %s, which docs/ARCHITECTURE.md:%d does not allow", pkg, dep, rule.line)
			}
		}
	}
}
