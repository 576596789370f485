// Package prometheus holds Prometheus alerting rules for Fibril
// (fibril-alerts.yml), their promtool unit tests (fibril-alerts_test.yml)
// and README.md. Its test keeps the rules and the Grafana dashboard in
// contrib/grafana true: every series they use is documented, the
// dashboard is well formed, and promtool accepts and passes the rules.
package prometheus

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

const (
	rulesFile     = "fibril-alerts.yml"
	rulesTestFile = "fibril-alerts_test.yml"
	dashboardFile = "../grafana/fibril-dashboard.json"
)

// metricDocs document the fibril_* series: docs/metrics.md, and the
// backend and plugin documents it links for the series that depend on the
// backend in use (each must be linked from docs/metrics.md).
var metricDocs = []string{
	"../../docs/metrics.md",
	"../../coordination/raft/README.md",
	"../../coordination/consul/README.md",
	"../../plugins/README.md",
}

// documentedName is how docs/metrics.md names a series (the pattern of
// core/broker's TestMetricsDocumented, which keeps that file true).
var documentedName = regexp.MustCompile("`(fibril_[a-z_]+)")

// documented returns the fibril_* series the documents name, and which of
// them are histograms (their table row says so).
func documented(t *testing.T) (names, histograms map[string]bool) {
	t.Helper()
	names, histograms = map[string]bool{}, map[string]bool{}
	index, err := os.ReadFile(metricDocs[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range metricDocs {
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		if doc != metricDocs[0] {
			rel := strings.TrimPrefix(doc, "../../")
			if !strings.Contains(string(index), "(../"+rel+"#metrics)") {
				t.Errorf("docs/metrics.md does not link %s#metrics, so the series there are not documented from it", rel)
			}
		}
		for _, line := range strings.Split(string(data), "\n") {
			for _, m := range documentedName.FindAllStringSubmatch(line, -1) {
				names[m[1]] = true
				if strings.Contains(line, "| histogram |") {
					histograms[m[1]] = true
				}
			}
		}
	}
	if len(names) < 50 || len(histograms) < 3 {
		t.Fatalf("read %d series and %d histograms from %v: the documents changed shape", len(names), len(histograms), metricDocs)
	}
	return names, histograms
}

// standardSeries are the go_* and process_* series the broker exports
// (the collectors it registers beside its own, docs/metrics.md#process).
func standardSeries(t *testing.T) map[string]bool {
	t.Helper()
	reg := prom.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, f := range fams {
		out[f.GetName()] = true
	}
	return out
}

var (
	fibrilName = regexp.MustCompile(`\bfibril_[a-z0-9_]+`)
	// selector is a metric name followed by its label matchers; the
	// dashboard writes every series with matchers ($job, $instance).
	selector = regexp.MustCompile(`\b([a-zA-Z_:][a-zA-Z0-9_:]*)\{`)
)

// checkName fails for a fibril_* name that is neither documented nor a
// documented histogram's _bucket, _sum or _count series.
func checkName(t *testing.T, where, name string, names, histograms map[string]bool) {
	t.Helper()
	if names[name] {
		return
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && histograms[base] {
			return
		}
	}
	t.Errorf("%s uses %s, which docs/metrics.md does not document", where, name)
}

// TestSeriesDocumented: the rules, their tests and the dashboard use only
// documented series.
func TestSeriesDocumented(t *testing.T) {
	names, histograms := documented(t)
	for _, f := range []string{rulesFile, rulesTestFile, dashboardFile} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		used := map[string]bool{}
		for _, n := range fibrilName.FindAllString(string(data), -1) {
			used[n] = true
		}
		if len(used) == 0 {
			t.Errorf("%s uses no fibril_* series", f)
		}
		for n := range used {
			checkName(t, f, n, names, histograms)
		}
	}
	// The dashboard's other series are the standard collectors'.
	std := standardSeries(t)
	for _, p := range dashboardPanels(t) {
		for _, tg := range p.Targets {
			for _, m := range selector.FindAllStringSubmatch(tg.Expr, -1) {
				if n := m[1]; !strings.HasPrefix(n, "fibril_") && !std[n] {
					t.Errorf("dashboard panel %q uses %s, which the broker does not export", p.Title, n)
				}
			}
		}
	}
}

type target struct {
	RefID string `json:"refId"`
	Expr  string `json:"expr"`
}

type panel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Datasource json.RawMessage `json:"datasource"`
	GridPos    struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []target `json:"targets"`
	Panels  []panel  `json:"panels"` // a collapsed row's
}

type dashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// dashboardPanels lists the panels that query, rows' nested ones included.
func dashboardPanels(t *testing.T) []panel {
	t.Helper()
	var out []panel
	for _, p := range readDashboard(t).Panels {
		if p.Type == "row" {
			out = append(out, p.Panels...)
			continue
		}
		out = append(out, p)
	}
	return out
}

// TestDashboard: the JSON parses; it picks its Prometheus data source with
// the DS_PROMETHEUS variable; every panel sits in a row, uses that data
// source and has queries, none of them empty.
func TestDashboard(t *testing.T) {
	d := readDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q, title %q", d.UID, d.Title)
	}
	hasDS := false
	for _, v := range d.Templating.List {
		if v.Name == "DS_PROMETHEUS" && v.Type == "datasource" && v.Query == "prometheus" {
			hasDS = true
		}
	}
	if !hasDS {
		t.Error(`no templating variable DS_PROMETHEUS of type "datasource" with query "prometheus"`)
	}
	ids := map[int]bool{}
	rows := 0
	check := func(p panel, inRow bool) {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		g := p.GridPos
		if g.W < 1 || g.H < 1 || g.X < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v off the 24-column grid", p.Title, g)
		}
		if p.Type == "row" {
			return
		}
		if !inRow {
			t.Errorf("panel %q is not in a row", p.Title)
		}
		var ds struct{ Type, UID string }
		if err := json.Unmarshal(p.Datasource, &ds); err != nil || ds.UID != "${DS_PROMETHEUS}" || ds.Type != "prometheus" {
			t.Errorf("panel %q: datasource %s, want prometheus ${DS_PROMETHEUS}", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no queries", p.Title)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q: query %s is empty", p.Title, tg.RefID)
			}
			if tg.RefID == "" || refs[tg.RefID] {
				t.Errorf("panel %q: refId %q missing or repeated", p.Title, tg.RefID)
			}
			refs[tg.RefID] = true
		}
	}
	for _, p := range d.Panels {
		if p.Type == "row" {
			rows++
			for _, inner := range p.Panels {
				check(inner, true)
			}
		}
		check(p, rows > 0)
	}
	if rows < 5 {
		t.Errorf("%d rows; the panels are meant to be grouped", rows)
	}
}

// alertBlock is one rule of fibril-alerts.yml as its own layout writes it.
type alertBlock struct {
	name  string
	lines []string
}

// alerts reads the alerting rules of fibril-alerts.yml: each starts at a
// "- alert:" line and runs to the next rule or group. It understands the
// file's layout, not YAML in general (promtool checks the YAML).
func alerts(t *testing.T) []*alertBlock {
	t.Helper()
	f, err := os.Open(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []*alertBlock
	var cur *alertBlock
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "- alert:"):
			cur = &alertBlock{name: strings.TrimSpace(strings.TrimPrefix(line, "- alert:"))}
			out = append(out, cur)
		case strings.HasPrefix(line, "- name:") || strings.HasPrefix(line, "- record:"):
			cur = nil
		case cur != nil:
			cur.lines = append(cur.lines, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAlertsAnnotated: every alert has a severity and both annotations,
// and at least three alerts are tested both firing and not firing.
func TestAlertsAnnotated(t *testing.T) {
	rules := alerts(t)
	if len(rules) < 8 {
		t.Fatalf("read %d alerts from %s", len(rules), rulesFile)
	}
	names := map[string]bool{}
	for _, a := range rules {
		if names[a.name] {
			t.Errorf("alert %s defined twice", a.name)
		}
		names[a.name] = true
		has := func(prefix string) bool {
			return slices.ContainsFunc(a.lines, func(l string) bool { return strings.HasPrefix(l, prefix) })
		}
		if !has("severity: critical") && !has("severity: warning") {
			t.Errorf("alert %s: no severity label (critical or warning)", a.name)
		}
		for _, k := range []string{"summary:", "description:", "expr:"} {
			if !has(k) {
				t.Errorf("alert %s: no %s", a.name, strings.TrimSuffix(k, ":"))
			}
		}
	}

	data, err := os.ReadFile(rulesTestFile)
	if err != nil {
		t.Fatal(err)
	}
	firing, quiet := map[string]bool{}, map[string]bool{}
	var name string
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "alertname:"):
			name = strings.TrimSpace(strings.TrimPrefix(line, "alertname:"))
			if !names[name] {
				t.Errorf("%s tests %s, which %s does not define", rulesTestFile, name, rulesFile)
			}
		case line == "exp_alerts: []":
			quiet[name] = true
		case line == "exp_alerts:":
			firing[name] = true
		}
	}
	both := 0
	for n := range firing {
		if quiet[n] {
			both++
		}
	}
	if both < 3 {
		t.Errorf("%s tests %d alerts both firing and not firing, want at least 3", rulesTestFile, both)
	}
}

// promtool returns the promtool binary, or skips (fails when
// FIBRIL_REQUIRE_PROMTOOL=1, as in CI) when it is not on PATH.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("FIBRIL_REQUIRE_PROMTOOL") == "1" {
			t.Fatal("FIBRIL_REQUIRE_PROMTOOL=1 but promtool is not on PATH (Debian: apt-get install prometheus)")
		}
		t.Skip("promtool is not on PATH, so the rules are not checked by it: install it (Debian: apt-get install prometheus) or set FIBRIL_REQUIRE_PROMTOOL=1 to make this a failure")
	}
	return p
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Errorf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
		return
	}
	t.Logf("%s %s:\n%s", filepath.Base(name), strings.Join(args, " "), out)
}

// TestPromtool: promtool accepts the rules and their unit tests pass; the
// dashboard's queries parse as PromQL too (as recording rules, with
// Grafana's $__rate_interval replaced).
func TestPromtool(t *testing.T) {
	bin := promtool(t)
	run(t, bin, "check", "rules", rulesFile)
	run(t, bin, "test", "rules", rulesTestFile)

	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for _, p := range dashboardPanels(t) {
		for _, tg := range p.Targets {
			expr := strings.ReplaceAll(tg.Expr, "$__rate_interval", "5m")
			quoted, err := json.Marshal(expr) // a JSON string is a YAML string
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "      - record: dashboard:panel_%d:%s\n        expr: %s\n", p.ID, tg.RefID, quoted)
		}
	}
	f := filepath.Join(t.TempDir(), "dashboard-queries.yml")
	if err := os.WriteFile(f, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, bin, "check", "rules", f)
}
