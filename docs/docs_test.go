package docs

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode"
)

var (
	// ruleRef is a rule id; ruleRange two ids joined by an ellipsis or a
	// dash ("S-150…S-156", "S-101–S-104"), which cites every id between.
	ruleRef   = regexp.MustCompile(`\bS-([0-9]+)\b`)
	ruleRange = regexp.MustCompile(`\bS-([0-9]+) ?(?:…|\.\.\.?|–|—|-) ?S-([0-9]+)\b`)
	// ruleDef is an entry of semantics.md.
	ruleDef = regexp.MustCompile(`<a id="s-([0-9]+)"></a>\*\*S-([0-9]+)\*\*`)
	// mdRef is a citation of a Markdown file with an anchor, repository-
	// relative in any file or relative to the citing file in Markdown.
	mdRef = regexp.MustCompile(`([A-Za-z0-9_.\-/]*[A-Za-z0-9_\-]\.md)#([A-Za-z0-9_\-]+)`)
	// localRef is a Markdown link to an anchor of the same file.
	localRef = regexp.MustCompile(`\]\(#([A-Za-z0-9_\-]+)\)`)
	// outside are citations of documents that are not in the repository.
	// (the SDKs' shared test vectors under ../shared are data, not a
	// source of truth, and may be read).
	outside = regexp.MustCompile(`(?i)\bWIRE(?:_V1)?(?:\.md)?\s*§|\bDESIGN(?:\.md)?\s*§|\bseed(?:'s)?\s*§|\bissues?\s*#?\s*[0-9]+\b|\bBROKER_SEMANTICS\b|\bWIRE_V1\b|\bDESIGN\.md\b|shared/(?:protocol/WIRE_V1|DESIGN|reference/|seed/)`)
	// anchorTag is an explicit anchor.
	anchorTag = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
)

// file is one tracked text file.
type file struct {
	path  string // slash-separated, relative to the repository root
	lines []string
}

var (
	loadOnce sync.Once
	root     string
	files    []file
	loadErr  error
)

// repo returns the repository's tracked text files (git ls-files, or a
// walk of the tree when git is unavailable), without vendor and testdata.
func repo(t *testing.T) (string, []file) {
	t.Helper()
	loadOnce.Do(func() {
		root, loadErr = filepath.Abs("..")
		if loadErr != nil {
			return
		}
		var paths []string
		paths, loadErr = tracked(root)
		if loadErr != nil {
			return
		}
		for _, p := range paths {
			if skipped(p) {
				continue
			}
			data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(p)))
			if err != nil {
				if os.IsNotExist(err) { // deleted in the work tree, not yet committed
					continue
				}
				loadErr = err
				return
			}
			if bytes.IndexByte(data, 0) >= 0 {
				continue // binary
			}
			files = append(files, file{path: p, lines: strings.Split(string(data), "\n")})
		}
	})
	if loadErr != nil {
		t.Fatalf("reading the repository: %v", loadErr)
	}
	return root, files
}

func tracked(root string) ([]string, error) {
	cmd := exec.Command("git", "ls-files", "-z")
	cmd.Dir = root
	if out, err := cmd.Output(); err == nil {
		var paths []string
		for _, p := range strings.Split(string(out), "\x00") {
			if p != "" {
				paths = append(paths, p)
			}
		}
		return paths, nil
	}
	var paths []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && p != root {
			return filepath.SkipDir
		}
		if !d.IsDir() {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			paths = append(paths, filepath.ToSlash(rel))
		}
		return nil
	})
	return paths, err
}

func skipped(p string) bool {
	for _, part := range strings.Split(p, "/") {
		if part == "vendor" || part == "testdata" {
			return true
		}
	}
	return p == "go.sum"
}

// defined returns the rule ids semantics.md defines.
func defined(t *testing.T, root string) map[int]bool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "docs", "semantics.md"))
	if err != nil {
		t.Fatal(err)
	}
	ids := map[int]bool{}
	for _, m := range ruleDef.FindAllStringSubmatch(string(data), -1) {
		if m[1] != m[2] {
			t.Errorf("docs/semantics.md: anchor s-%s labels S-%s", m[1], m[2])
		}
		n, _ := strconv.Atoi(m[2])
		ids[n] = true
	}
	if len(ids) == 0 {
		t.Fatal("docs/semantics.md defines no rule ids")
	}
	return ids
}

// TestRuleIDsDefined fails for every S-n cited in a tracked file (each id
// of a cited range included) that docs/semantics.md has no entry for.
func TestRuleIDsDefined(t *testing.T) {
	root, files := repo(t)
	ids := defined(t, root)
	for _, f := range files {
		if f.path == "docs/semantics.md" {
			continue
		}
		for i, line := range f.lines {
			if !strings.Contains(line, "S-") {
				continue
			}
			var cited []int
			for _, m := range ruleRef.FindAllStringSubmatch(line, -1) {
				n, _ := strconv.Atoi(m[1])
				cited = append(cited, n)
			}
			for _, m := range ruleRange.FindAllStringSubmatch(line, -1) {
				a, _ := strconv.Atoi(m[1])
				b, _ := strconv.Atoi(m[2])
				for n := a; n <= b && b-a < 200; n++ {
					cited = append(cited, n)
				}
			}
			for _, n := range cited {
				if !ids[n] {
					t.Errorf("%s:%d: S-%d is not defined in docs/semantics.md", f.path, i+1, n)
					ids[n] = true // report each missing id once
				}
			}
		}
	}
}

// TestDocAnchorsExist fails for every citation <file>.md#anchor whose file
// or anchor does not exist, and every same-file link [..](#anchor) in
// Markdown whose anchor does not exist.
func TestDocAnchorsExist(t *testing.T) {
	root, files := repo(t)
	anchors := map[string]map[string]bool{} // by repository-relative path
	anchorsOf := func(p string) (map[string]bool, bool) {
		if a, ok := anchors[p]; ok {
			return a, a != nil
		}
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(p)))
		if err != nil {
			anchors[p] = nil
			return nil, false
		}
		a := Anchors(string(data))
		anchors[p] = a
		return a, true
	}
	for _, f := range files {
		dir := path.Dir(f.path)
		isMD := strings.HasSuffix(f.path, ".md")
		for i, line := range f.lines {
			if !strings.Contains(line, ".md#") && !strings.Contains(line, "](#") {
				continue
			}
			for _, m := range mdRef.FindAllStringSubmatchIndex(line, -1) {
				if m[0] > 0 && strings.ContainsRune(":/", rune(line[m[0]-1])) {
					continue // part of a URL
				}
				ref, anchor := line[m[2]:m[3]], line[m[4]:m[5]]
				if strings.HasPrefix(ref, "//") {
					continue
				}
				// A Markdown link is relative to its file; a citation in a
				// comment is relative to the repository root.
				var candidates []string
				if isMD {
					candidates = append(candidates, path.Join(dir, ref))
				}
				candidates = append(candidates, path.Clean(ref))
				found, ok := false, false
				var target string
				for _, c := range candidates {
					if strings.HasPrefix(c, "../") {
						continue // outside the repository
					}
					var a map[string]bool
					if a, ok = anchorsOf(c); ok {
						target, found = c, a[anchor]
						break
					}
				}
				switch {
				case target == "":
					t.Errorf("%s:%d: %s#%s: no such file in the repository", f.path, i+1, ref, anchor)
				case !found:
					t.Errorf("%s:%d: %s has no anchor #%s", f.path, i+1, target, anchor)
				}
			}
			if isMD {
				for _, m := range localRef.FindAllStringSubmatch(line, -1) {
					if a, _ := anchorsOf(f.path); !a[m[1]] {
						t.Errorf("%s:%d: no anchor #%s in this file", f.path, i+1, m[1])
					}
				}
			}
		}
	}
}

// TestNoOutsideCitations fails for every Go file line that cites a
// document outside the repository (the protocol notes, the design note,
// the seed, an issue): cite docs/protocol.md, docs/semantics.md or a
// README beside the code instead, or say the reason.
func TestNoOutsideCitations(t *testing.T) {
	root, files := repo(t)
	for _, f := range files {
		// This file names the patterns it looks for.
		if !strings.HasSuffix(f.path, ".go") || f.path == "docs/docs_test.go" {
			continue
		}
		for i, line := range f.lines {
			if !mayCiteOutside(line) {
				continue
			}
			for _, loc := range outside.FindAllStringIndex(line, -1) {
				m := line[loc[0]:loc[1]]
				if strings.EqualFold(m, "DESIGN.md") && ownDesign(root, f.path, line[:loc[0]]) {
					continue
				}
				t.Errorf("%s:%d: cites %q, which is outside the repository", f.path, i+1, m)
			}
		}
	}
}

// ownDesign reports whether a "DESIGN.md" a file names (before is the text
// in front of it) is a design note in the repository: one named by its path,
// or the one beside the citing file. Only the team's design note outside the
// repository is an outside citation.
func ownDesign(root, file, before string) bool {
	if strings.HasSuffix(before, "/") {
		return true
	}
	_, err := os.Stat(filepath.Join(root, filepath.FromSlash(path.Dir(file)), "DESIGN.md"))
	return err == nil
}

// mayCiteOutside is a cheap filter in front of the outside pattern: every
// match contains one of these (the pattern ignores case).
func mayCiteOutside(line string) bool {
	if strings.Contains(line, "§") || strings.Contains(line, "shared/") {
		return true
	}
	lower := strings.ToLower(line)
	for _, s := range []string{"issue", "broker_semantics", "wire_v1", "design.md"} {
		if strings.Contains(lower, s) {
			return true
		}
	}
	return false
}

// Anchors returns the anchors a Markdown document offers: GitHub-style
// slugs of its headings (outside code fences; a repeated slug gets -1,
// -2, …) and explicit <a id="…"> or <a name="…"> tags.
func Anchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	fence := ""
	sc := bufio.NewScanner(strings.NewReader(md))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		for _, m := range anchorTag.FindAllStringSubmatch(line, -1) {
			out[m[1]] = true
		}
		if h := strings.TrimLeft(line, "#"); len(h) < len(line) && len(line)-len(h) <= 6 && strings.HasPrefix(h, " ") {
			s := Slug(h)
			if n := seen[s]; n > 0 {
				out[fmt.Sprintf("%s-%d", s, n)] = true
			} else {
				out[s] = true
			}
			seen[s]++
		}
	}
	return out
}

var (
	mdLink  = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	htmlTag = regexp.MustCompile(`<[^>]*>`)
)

// Slug is GitHub's anchor for a heading's text: links reduced to their
// text, HTML tags dropped, lower case, every character that is not a
// letter, digit, space, hyphen or underscore removed, spaces turned into
// hyphens.
func Slug(heading string) string {
	h := mdLink.ReplaceAllString(strings.TrimSpace(heading), "$1")
	h = htmlTag.ReplaceAllString(h, "")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"Answers":                         "answers",
		"Quiet window":                    "quiet-window",
		"Code 504":                        "code-504",
		"Fsync policies":                  "fsync-policies",
		"`storage.fsync` — what it means": "storagefsync--what-it-means",
		"[Link](x.md) text":               "link-text",
	} {
		if got := Slug(in); got != want {
			t.Errorf("Slug(%q) = %q, want %q", in, got, want)
		}
	}
	a := Anchors("# A\n```\n# not a heading\n```\n## A\n<a id=\"x-1\"></a>\n")
	var got []string
	for k := range a {
		got = append(got, k)
	}
	sort.Strings(got)
	if strings.Join(got, ",") != "a,a-1,x-1" {
		t.Errorf("Anchors = %v, want [a a-1 x-1]", got)
	}
}

// required are the anchors other code and docs are told to cite; renaming
// a heading must not silently break them.
var required = map[string][]string{
	"docs/protocol.md": {"transport", "frames", "request-ids", "endpoints", "answers", "handshake",
		"quiet-window", "resume", "authentication", "heartbeats", "going-away", "malformed", "publish",
		"subscriptions", "not-yet-served", "declare", "topology", "redirect", "reconcile", "reason-codes",
		"replication-ops", "deviations", "extensions", "forwarded-session", "owner-side", "code-504"},
	"core/routing/README.md": {"handler-rule", "gateway-set", "fence"},
	"core/storage/README.md": {"group-commit", "recovery", "fsync-policies"},
}

func TestRequiredAnchors(t *testing.T) {
	root, _ := repo(t)
	for p, want := range required {
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(p)))
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		have := Anchors(string(data))
		for _, a := range want {
			if !have[a] {
				t.Errorf("%s lacks the anchor #%s", p, a)
			}
		}
	}
}
