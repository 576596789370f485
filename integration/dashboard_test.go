package integration

// The browser dashboard (docs/admin.md#dashboard) in a real headless
// Chromium against a real three-broker cluster with one private node and
// admin auth on: every page, the private marking, live queue numbers, a
// purge and a stream delete through the confirmation dialog, the connection list (forwarded
// sessions on the private owner), the settings form and its conflict.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/testkit"
	"github.com/fibrilgo/fibril/integration/browser"
)

const dashUser, dashPassword = "fibril", "dash-secret"

// requireBrowser returns the Chromium to drive, or skips (fails under
// FIBRIL_REQUIRE_BROWSER=1) when there is none.
func requireBrowser(t *testing.T) string {
	t.Helper()
	bin, err := browser.Find()
	if err != nil {
		if os.Getenv("FIBRIL_REQUIRE_BROWSER") == "1" {
			t.Fatalf("FIBRIL_REQUIRE_BROWSER=1 but %v", err)
		}
		t.Skipf("skipping the browser test: %v (FIBRIL_REQUIRE_BROWSER=1 makes this a failure)", err)
	}
	return bin
}

// adminDo sends a request to an admin listener, with the dashboard test's
// admin login unless anonymous, without following redirects.
func adminDo(t *testing.T, method, admin, path, body string, anonymous bool) (*http.Response, string) {
	t.Helper()
	g := newGuard(t)
	tr := &http.Transport{DialContext: g.dial, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctxT(t, opTimeout), method, "http://"+admin+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if !anonymous {
		req.SetBasicAuth(dashUser, dashPassword)
	}
	hc := &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(out)
}

// publishTo publishes one confirmed message to partition p of topic,
// retrying while the cluster settles (placement, first leadership).
func publishTo(t *testing.T, c *client.Client, topic string, p uint32, payload string) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_, err := c.Publisher(topic, client.PublisherOptions{}).PublishConfirmed(ctx, client.Message{Partition: &p, Payload: []byte(payload)})
		cancel()
		if err == nil {
			return
		}
		if !client.Retryable(err) || time.Now().After(deadline) {
			t.Fatalf("publish to %s#%d: %v", topic, p, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// dash is a browser on the dashboard, with the test's bounded helpers.
type dash struct {
	t     *testing.T
	ctx   context.Context
	br    *browser.Browser
	page  *browser.Page
	shots string
}

// openDashboard launches Chromium (stopped at cleanup, by its process
// group) with one page sending headers on every request.
func openDashboard(t *testing.T, bin, shots string, headers map[string]string) *dash {
	t.Helper()
	d := &dash{t: t, ctx: ctxT(t, 4*time.Minute), shots: shots} // the whole browser part
	br, err := browser.Launch(ctxT(t, 60*time.Second), bin)
	if err != nil {
		t.Fatal(err)
	}
	d.br = br
	t.Logf("chromium pid %d", br.PID())
	t.Cleanup(func() {
		if err := br.Close(); err != nil {
			t.Error(err)
		}
		if errs := br.Errors(); len(errs) > 0 {
			t.Errorf("the dashboard reported errors: %q", errs)
		}
	})
	if d.page, err = br.NewPage(d.ctx); err != nil {
		t.Fatal(err)
	}
	if len(headers) > 0 {
		if err := d.page.SetHeaders(d.ctx, headers); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// wait waits (bounded) until the JavaScript expression is truthy.
func (d *dash) wait(what, expr string) {
	d.t.Helper()
	if err := d.page.WaitFor(d.ctx, waitTimeout, what, expr); err != nil {
		var text string
		_ = d.page.Eval(d.ctx, `document.querySelector('main').innerText`, &text)
		d.t.Fatalf("%v\npage text:\n%s\nbrowser errors: %q", err, text, d.br.Errors())
	}
}

func (d *dash) eval(expr string, out any) {
	d.t.Helper()
	if err := d.page.Eval(d.ctx, expr, out); err != nil {
		d.t.Fatalf("%s: %v", expr, err)
	}
}

// shot saves a screenshot of the whole page as name.png.
func (d *dash) shot(name string) {
	d.t.Helper()
	path := filepath.Join(d.shots, name+".png")
	if err := d.page.Screenshot(d.ctx, path); err != nil {
		d.t.Fatalf("screenshot %s: %v", name, err)
	}
	d.t.Logf("screenshot: %s", path)
}

// show switches to a page by its hash route and waits until it rendered.
func (d *dash) show(route string) {
	d.t.Helper()
	d.eval(fmt.Sprintf(`location.hash = %q`, "#/"+route), nil)
	d.wait(route+" page shown", fmt.Sprintf(`document.body.dataset.rendered === %q && !document.getElementById('page-%s').hidden`, route, route))
}

// text is the trimmed text of the first element matching sel ("" if none).
func (d *dash) text(sel string) string {
	d.t.Helper()
	var s string
	d.eval(fmt.Sprintf(`(document.querySelector(%q) || {}).textContent || ''`, sel), &s)
	return strings.TrimSpace(s)
}

// screenshotDir is $FIBRIL_SCREENSHOT_DIR, else a directory of the test's.
func screenshotDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("FIBRIL_SCREENSHOT_DIR")
	if dir == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// A standalone broker without admin auth: the pages say standalone.
func TestDashboardStandalone(t *testing.T) {
	bin := requireBrowser(t)
	b := startBroker(t)
	d := openDashboard(t, bin, screenshotDir(t), nil)
	if err := d.page.Navigate(d.ctx, "http://"+b.Admin+"/dashboard/"); err != nil {
		t.Fatal(err)
	}
	d.wait("overview", `(document.querySelector('[data-card=mode] dd') || {}).textContent === 'standalone'`)
	if n := d.text(`[data-card=nodes] dd`); n != "1 (standalone)" {
		t.Fatalf("nodes card %q", n)
	}
	d.show("cluster")
	d.wait("standalone note", `document.getElementById('cluster-note').textContent.includes('standalone') &&
		document.getElementById('cluster-table').hidden`)
	d.show("queues")
	d.wait("no queue", `!document.querySelector('#page-queues .empty').hidden`)
	d.shot("standalone-queues")
}

func TestDashboard(t *testing.T) {
	bin := requireBrowser(t)
	began := time.Now()
	shots := screenshotDir(t)
	pw := filepath.Join(t.TempDir(), "admin-password")
	if err := os.WriteFile(pw, []byte(dashPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rc := startRaftClusterWith(t, 3, func(i int) []string {
		if i == 2 {
			return []string{"--broker.visibility=private"}
		}
		return nil
	}, "--admin.auth.enabled", "--admin.auth.password_file="+pw)
	gw, private := rc.nodes[0], rc.nodes[2]

	// The dashboard sits behind the admin login, like the API.
	for _, path := range []string{"/", "/dashboard/", "/dashboard/app.js", "/admin/api/overview"} {
		if resp, _ := adminDo(t, "GET", gw.Admin, path, "", true); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("GET %s without the admin login: %d, want 401", path, resp.StatusCode)
		}
	}
	if resp, _ := adminDo(t, "GET", gw.Admin, "/", "", false); resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/dashboard/" {
		t.Fatalf("GET /: %d to %q, want 302 to /dashboard/", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp, body := adminDo(t, "GET", gw.Admin, "/dashboard/", "", false); resp.StatusCode != 200 || !strings.Contains(body, "<nav") ||
		!strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'self'") {
		t.Fatalf("GET /dashboard/: %d, CSP %q, body %.200q", resp.StatusCode, resp.Header.Get("Content-Security-Policy"), body)
	}
	resp, body := adminDo(t, "GET", gw.Admin, "/admin/api/overview", "", false)
	var ov struct {
		Node, Mode, Version string
		GoVersion           string `json:"go_version"`
	}
	if err := json.Unmarshal([]byte(body), &ov); err != nil || resp.StatusCode != 200 || ov.Node != "node-1" || ov.Mode != "cluster" ||
		ov.Version == "" || !strings.HasPrefix(ov.GoVersion, "go") {
		t.Fatalf("overview: %d %s (%v)", resp.StatusCode, body, err)
	}

	// A client on the public broker that remembers its local addresses,
	// to find itself on the Connections page.
	var mu sync.Mutex
	local := map[string]bool{}
	c := newClient(t, gw.Addr, func(o *client.Options) {
		inner := o.Dial
		o.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := inner(ctx, network, addr)
			if err == nil {
				mu.Lock()
				local[conn.LocalAddr().String()] = true
				mu.Unlock()
			}
			return conn, err
		}
	})
	const parts, msgs = 6, 12
	if _, err := c.DeclareQueue(ctxT(t, opTimeout), client.QueueSpec{Topic: "orders", Partitions: parts}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeclareStream(ctxT(t, opTimeout), client.StreamSpec{Topic: "events", Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		publishTo(t, c, "events", uint32(i%2), fmt.Sprint("e", i))
	}

	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte(dashUser+":"+dashPassword))
	d := openDashboard(t, bin, shots, map[string]string{"Authorization": auth})
	ctx, page := d.ctx, d.page
	wait, eval, shot, show, text := d.wait, d.eval, d.shot, d.show, d.text

	// / leads to the dashboard; Overview first.
	if err := page.Navigate(ctx, "http://"+gw.Admin+"/"); err != nil {
		t.Fatal(err)
	}
	wait("redirected to /dashboard/", `location.pathname === '/dashboard/'`)
	eval(`window.notReloaded = true`, nil) // every number below comes without a reload
	wait("overview numbers", `(document.querySelector('[data-card=nodes] dd') || {}).textContent === '3 / 3' &&
		(document.querySelector('[data-card=queues] dd') || {}).textContent === '1 / 1'`)
	// Publish while the page watches: the numbers follow without a
	// reload, and the rates make the trend lines move.
	for i := range msgs {
		publishTo(t, c, "orders", uint32(i%parts), fmt.Sprint("m", i))
	}
	wait("overview ready 12", `(document.querySelector('[data-card=ready] dd') || {}).textContent === '12'`)
	if m, v := text(`[data-card=mode] dd`), text(`[data-card=version] dd`); m != "cluster" || v == "" {
		t.Fatalf("overview: mode %q, version %q", m, v)
	}
	if n := text(`[data-card=node] dd`); !strings.HasPrefix(n, "node-1") {
		t.Fatalf("overview node %q", n)
	}
	t.Logf("overview alerts: %s", text(`#alerts`))
	shot("overview")

	// Cluster: three live nodes, node-3 marked private.
	show("cluster")
	wait("three nodes", `document.querySelectorAll('#cluster-table tbody tr').length === 3`)
	var marks map[string]string
	eval(`Object.fromEntries([...document.querySelectorAll('#cluster-table tbody tr')].map(tr =>
		[tr.dataset.key, tr.querySelector('[data-col=visibility]').textContent + '/' + tr.querySelector('[data-col=live]').textContent]))`, &marks)
	if marks["node-3"] != "private/live" || marks["node-1"] != "public/live" || marks["node-2"] != "public/live" {
		t.Fatalf("cluster page visibility/live: %v", marks)
	}
	if !strings.Contains(text(`#cluster-table tr[data-key="node-3"] [data-col=visibility] .badge.private`), "private") {
		t.Fatal("node-3 has no private badge")
	}
	shot("cluster")

	// Queues: the published messages are ready; the row opens the
	// partitions; purge through the dialog.
	show("queues")
	row := `#queues-table tr[data-key="queue|orders|"]`
	wait("orders ready 12", fmt.Sprintf(`(document.querySelector('%s [data-col=ready]') || {}).textContent === '12'`, row))
	eval(fmt.Sprintf(`document.querySelector('%s [data-col=topic] button').click()`, row), nil)
	wait("partition details", fmt.Sprintf(`document.querySelectorAll('#queues-details tbody tr').length === %d`, parts))
	var owners []string
	eval(`[...document.querySelectorAll('#queues-details tbody [data-col=owner]')].map(td => td.textContent)`, &owners)
	t.Logf("orders partition owners as the dashboard shows them: %v", owners)
	shot("queues")
	eval(`document.getElementById('purge-open').click()`, nil)
	wait("purge dialog open", `document.getElementById('confirm-dialog').open && document.activeElement.id === 'confirm-input'`)
	if err := page.Type(ctx, "order"); err != nil {
		t.Fatal(err)
	}
	var disabled bool
	eval(`document.getElementById('confirm-go').disabled`, &disabled)
	if !disabled {
		t.Fatal("the purge button is enabled before the topic name is typed in full")
	}
	if err := page.Type(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	wait("purge enabled", `!document.getElementById('confirm-go').disabled`)
	shot("purge-dialog")
	eval(`document.getElementById('confirm-go').click()`, nil)
	wait("purge answer", `document.getElementById('confirm-result').textContent.startsWith('Purged 12 messages')`)
	t.Logf("purge answer: %s", text(`#confirm-result`))
	eval(`document.getElementById('confirm-cancel').click()`, nil)
	wait("ready 0 after the purge", fmt.Sprintf(`!document.getElementById('confirm-dialog').open &&
		(document.querySelector('%s [data-col=ready]') || {}).textContent === '0'`, row))
	shot("queues-purged")
	var same bool
	if eval(`window.notReloaded === true`, &same); !same {
		t.Fatal("the page was reloaded")
	}

	// The same page on a phone: nothing wider than the screen but the
	// tables, which scroll.
	if err := page.Viewport(ctx, 390, 844, true); err != nil {
		t.Fatal(err)
	}
	var overflow bool
	eval(`new Promise(r => requestAnimationFrame(() => r(document.documentElement.scrollWidth > window.innerWidth + 1)))`, &overflow)
	if overflow {
		t.Error("the queues page is wider than a phone's screen")
	}
	shot("queues-phone")
	if err := page.Viewport(ctx, 1280, 900, false); err != nil {
		t.Fatal(err)
	}

	// Streams.
	show("streams")
	srow := `#streams-table tr[data-key="stream|events|"]`
	wait("events records 3", fmt.Sprintf(`(document.querySelector('%s [data-col=records]') || {}).textContent === '3'`, srow))
	eval(fmt.Sprintf(`document.querySelector('%s [data-col=topic] button').click()`, srow), nil)
	wait("stream details", `document.querySelectorAll('#streams-details tbody tr').length === 2`)
	shot("streams")
	// Delete the stream through the dialog: every broker drops it.
	eval(`document.getElementById('stream-delete-open').click()`, nil)
	wait("delete dialog open", `document.getElementById('confirm-dialog').open && document.getElementById('confirm-force-box').hidden`)
	if err := page.Type(ctx, "events"); err != nil {
		t.Fatal(err)
	}
	wait("delete enabled", `!document.getElementById('confirm-go').disabled`)
	shot("delete-dialog")
	eval(`document.getElementById('confirm-go').click()`, nil)
	wait("delete answer", `document.getElementById('confirm-result').textContent.startsWith('Deleted stream events: 2 partitions, 3 records')`)
	t.Logf("delete answer: %s", text(`#confirm-result`))
	eval(`document.getElementById('confirm-cancel').click()`, nil)
	wait("the stream is gone", fmt.Sprintf(`!document.querySelector('%s') && document.getElementById('streams-details').hidden`, srow))

	// Connections: this test's client, with its subscriptions.
	sub := subscribe(t, c, "orders", client.SubscribeOptions{Prefetch: 4})
	defer sub.Close()
	show("connections")
	type connRow struct{ Remote, User, Subs, Fwd string }
	var mine connRow
	testkit.EventuallyReport(t, waitTimeout, func() bool {
		var rows []connRow
		eval(`[...document.querySelectorAll('#connections-table tbody tr')].map(tr => ({
			Remote: tr.querySelector('[data-col=remote]').textContent, User: tr.querySelector('[data-col=user]').textContent,
			Subs: tr.querySelector('[data-col=subscriptions]').textContent, Fwd: tr.querySelector('[data-col=forwarding]').textContent}))`, &rows)
		mu.Lock()
		defer mu.Unlock()
		for _, r := range rows {
			if local[r.Remote] && r.User == dashUser && strings.Contains(r.Subs, "orders#") {
				mine = r
				return true
			}
		}
		return false
	}, func() string {
		return "the test's client with its subscriptions on the Connections page: " + text(`#connections-table tbody`)
	})
	t.Logf("this client on the gateway: %+v", mine)
	shot("connections")

	// The private owner shows the gateway's forwarded session "via node
	// node-1 for user fibril" (when it owns a partition of orders, which
	// the subscription then reaches through the gateway).
	ownsSome := false
	for _, o := range owners {
		ownsSome = ownsSome || strings.HasPrefix(o, private.id)
	}
	if ownsSome {
		if err := page.Navigate(ctx, "http://"+private.Admin+"/dashboard/#/connections"); err != nil {
			t.Fatal(err)
		}
		wait("forwarded session on the private node", `[...document.querySelectorAll('#connections-table [data-col=forwarding]')]
			.some(td => td.textContent.includes('via node node-1 for user fibril'))`)
		shot("connections-private-node")
		if err := page.Navigate(ctx, "http://"+gw.Admin+"/dashboard/"); err != nil {
			t.Fatal(err)
		}
	} else {
		t.Logf("node-3 owns no partition of orders (%v): no forwarded session to look at", owners)
	}

	// Settings: the form loads; a save over a stale version shows the
	// conflict; after a reload it saves.
	show("settings")
	wait("settings loaded", `document.getElementById('settings-version').textContent.startsWith('Version ') &&
		document.querySelectorAll('#settings-fields input').length > 5`)
	shot("settings")
	resp, body = adminDo(t, "GET", gw.Admin, "/admin/api/runtime-settings", "", false)
	var cur struct {
		Version  uint64         `json:"version"`
		Settings map[string]any `json:"settings"`
	}
	if err := json.Unmarshal([]byte(body), &cur); err != nil || resp.StatusCode != 200 {
		t.Fatalf("settings: %d %s", resp.StatusCode, body)
	}
	put, _ := json.Marshal(map[string]any{"expected_version": cur.Version, "settings": cur.Settings})
	if resp, body := adminDo(t, "PUT", gw.Admin, "/admin/api/runtime-settings", string(put), false); resp.StatusCode != 200 {
		t.Fatalf("bump the settings version: %d %s", resp.StatusCode, body)
	}
	eval(`document.getElementById('settings-save').click()`, nil)
	wait("409 shown", `document.getElementById('settings-message').dataset.conflict === '1' &&
		document.getElementById('settings-message').textContent.includes('Conflict (409)')`)
	shot("settings-conflict")
	eval(`document.getElementById('settings-reload').click()`, nil)
	wait("reloaded", fmt.Sprintf(`document.getElementById('settings-version').textContent.startsWith('Version %d')`, cur.Version+1))
	eval(`document.getElementById('settings-save').click()`, nil)
	wait("saved", fmt.Sprintf(`document.getElementById('settings-message').textContent.startsWith('Saved: version %d')`, cur.Version+2))

	// Dark scheme.
	if err := page.ColorScheme(ctx, "dark"); err != nil {
		t.Fatal(err)
	}
	show("overview")
	wait("overview again", `(document.querySelector('[data-card=ready] dd') || {}).textContent === '0'`)
	shot("overview-dark")

	t.Logf("dashboard test took %v (cluster start included)", time.Since(began).Round(time.Millisecond))
}
