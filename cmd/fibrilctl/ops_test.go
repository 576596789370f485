package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func readyz(t *testing.T) int {
	t.Helper()
	resp, err := http.Get("http://" + adminAddr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// drain and undrain on the test broker (standalone): the drain turns
// /readyz false, the undrain true again.
func TestDrainUndrain(t *testing.T) {
	t.Cleanup(func() { ctl(t, "", "undrain") }) // the broker is shared
	r := ctl(t, "", "drain", "--grace", "0s", "--message", "test drain")
	mustOK(t, r, "drain")
	// (Connections of earlier tests may still be closing: any count.)
	if !regexp.MustCompile(`^draining broker at ` + regexp.QuoteMeta(adminAddr) + `\n  connections sent GOING_AWAY: \d+ \(grace 0s\)\n` +
		`  partitions still owned: +0 \(handoff complete\)\n`).MatchString(r.stdout) {
		t.Errorf("drain printed\n%s", r.stdout)
	}
	if code := readyz(t); code != 503 {
		t.Fatalf("readyz while draining: %d", code)
	}
	r = ctl(t, "", "undrain")
	mustOK(t, r, "undrain")
	if !strings.Contains(r.stdout, "undrained broker at "+adminAddr) || !strings.Contains(r.stdout, "note: connections already sent GOING_AWAY") {
		t.Fatalf("undrain printed\n%s", r.stdout)
	}
	if code := readyz(t); code != 200 {
		t.Fatalf("readyz after undrain: %d", code)
	}
	r = ctl(t, "", "undrain", "--json")
	mustOK(t, r, "undrain --json")
	var a map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &a); err != nil || a["was_draining"] != false {
		t.Fatalf("undrain --json: %q %v", r.stdout, err)
	}
	if r := ctl(t, "", "undrain"); !strings.Contains(r.stdout, "was not draining") {
		t.Fatalf("second undrain printed %q", r.stdout)
	}
	if r := ctl(t, "", "drain", "--grace", "-1s"); r.code != exitUsage {
		t.Fatalf("negative grace: %+v", r)
	}
	// --node needs a cluster.
	if r := ctl(t, "", "drain", "--node", "n1"); r.code != exitFail || !strings.Contains(r.stderr, "standalone") {
		t.Fatalf("--node on a standalone broker: %+v", r)
	}
}

// fakeNode is a node's admin API that answers drain and undrain and
// records what it was asked.
type fakeNode struct {
	*httptest.Server
	mu       sync.Mutex
	requests []string // "METHOD PATH BODY"
}

func newFakeNode(t *testing.T, drainAnswer, undrainAnswer string) *fakeNode {
	f := &fakeNode{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.requests = append(f.requests, r.Method+" "+r.URL.Path+" "+string(body))
		f.mu.Unlock()
		if u, p, _ := r.BasicAuth(); u != "ops" || p != "s3cret" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch r.Method + " " + r.URL.Path {
		case "POST /admin/api/drain":
			_, _ = w.Write([]byte(drainAnswer))
		case "POST /admin/api/undrain":
			_, _ = w.Write([]byte(undrainAnswer))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeNode) addr() string { return strings.TrimPrefix(f.URL, "http://") }

func (f *fakeNode) asked() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.requests...)
}

// --node finds the node's admin address in the cluster's topology and
// calls that broker, with the same credentials.
func TestDrainNode(t *testing.T) {
	n2 := newFakeNode(t, `{"connections_notified":2,"owned_partitions_remaining":3,"handoff_complete":false}`,
		`{"was_draining":true,"owned_partitions":1,"fences_lifted":1,"fenced_handed_over":2,"fences_held":0,"note":"partitions already handed over stay with their new owners"}`)
	n3 := newFakeNode(t, `{}`, `{"was_draining":true,"owned_partitions":0,"fences_lifted":0,"fences_held":1,"note":"x"}`)
	_, n3port, _ := net.SplitHostPort(n3.addr())
	topo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/admin/api/topology" {
			http.NotFound(w, r)
			return
		}
		// n3's admin listener is bound to every interface: its peer
		// address gives the host.
		_, _ = w.Write([]byte(`{"self":"n1","nodes":[{"id":"n1","live":true,"admin_addr":"127.0.0.1:1"},
		 {"id":"n2","live":true,"admin_addr":"` + n2.addr() + `"},
		 {"id":"n3","live":true,"peer_addr":"127.0.0.1:9","admin_addr":"0.0.0.0:` + n3port + `"},
		 {"id":"n4","live":false,"admin_addr":""}],"partitions":[]}`))
	}))
	defer topo.Close()
	admin := strings.TrimPrefix(topo.URL, "http://")
	auth := []string{"--admin", admin, "--admin-user", "ops", "--admin-password", "s3cret"}

	r := ctl(t, "", append(auth, "drain", "--node", "n2", "--grace", "5s", "--message", "maintenance")...)
	mustOK(t, r, "drain --node n2")
	for _, want := range []string{"draining node n2 (admin " + n2.addr() + ")", "connections sent GOING_AWAY: 2 (grace 5s)",
		"partitions still owned:      3, being handed to in-sync followers", `"fibrilctl drain --node n2" again`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("drain --node: no %q in\n%s", want, r.stdout)
		}
	}
	if got := n2.asked(); len(got) != 1 || got[0] != `POST /admin/api/drain {"grace_ms":5000,"message":"maintenance"}` {
		t.Fatalf("n2 was asked %q", got)
	}
	r = ctl(t, "", append(auth, "drain", "--node", "n2", "--json")...)
	mustOK(t, r, "drain --json")
	var d map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &d); err != nil || d["owned_partitions_remaining"] != 3.0 {
		t.Fatalf("drain --json: %q %v", r.stdout, err)
	}

	r = ctl(t, "", append(auth, "undrain", "--node", "n2")...)
	mustOK(t, r, "undrain --node n2")
	for _, want := range []string{"undrained node n2", "partitions it owns:     1", "handoff fences lifted:  1", "note: partitions already handed over"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("undrain --node: no %q in\n%s", want, r.stdout)
		}
	}
	// A fence whose handoff's outcome was not known yet: exit 1, retry.
	r = ctl(t, "", append(auth, "undrain", "--node", "n3")...)
	if r.code != exitFail || !strings.Contains(r.stdout, "undrained node n3 (admin 127.0.0.1:"+n3port+")") ||
		!strings.Contains(r.stderr, "1 partition(s) still fenced") {
		t.Fatalf("undrain --node n3: %+v", r)
	}
	for _, tc := range []struct{ node, want string }{
		{"n9", `node "n9" is not in the cluster the broker at ` + admin + ` knows (nodes: n1, n2, n3, n4)`},
		{"n4", "node n4 publishes no admin address"},
	} {
		r := ctl(t, "", append(auth, "drain", "--node", tc.node)...)
		if r.code != exitFail || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("drain --node %s: exit %d, stderr %q", tc.node, r.code, r.stderr)
		}
	}
	// Wrong credentials: the node's 401 and the hint.
	r = ctl(t, "", "--admin", admin, "--admin-user", "ops", "--admin-password", "nope", "undrain", "--node", "n2")
	if r.code != exitFail || !strings.Contains(r.stderr, "HTTP 401") || !strings.Contains(r.stderr, "--admin-user/--admin-password") {
		t.Fatalf("wrong password: %+v", r)
	}
}

// connections lists the test broker's client connections; a consumer's
// subscription is counted.
func TestConnections(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan result, 1)
	go func() { done <- ctlCtx(ctx, "", "consume", "--topic", "conn-listed", "--partitions", "0") }()
	defer func() { cancel(); <-done }()
	var found *connInfo
	deadline := time.Now().Add(20 * time.Second)
	for found == nil {
		r := ctl(t, "", "connections", "--json")
		mustOK(t, r, "connections --json")
		var v struct {
			Connections []connInfo `json:"connections"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
			t.Fatalf("connections --json %q: %v", r.stdout, err)
		}
		for i, c := range v.Connections {
			if slices.Contains(c.Subscriptions, "conn-listed#0") {
				found = &v.Connections[i]
			}
		}
		if found == nil && time.Now().After(deadline) {
			t.Fatalf("no subscribed connection listed: %s", r.stdout)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if found.User != "fibril" || found.ClientID == "" || found.Remote == "" {
		t.Fatalf("connection: %+v", *found)
	}
	r := ctl(t, "", "connections")
	mustOK(t, r, "connections")
	if !strings.HasPrefix(r.stdout, "CONN") || !strings.Contains(r.stdout, "fibril") || !strings.Contains(r.stdout, "connection(s)") {
		t.Fatalf("connections table:\n%s", r.stdout)
	}
}

// The table of a cluster owner: a forwarded session says whose it is, a
// gateway's says where it forwards.
func TestConnectionsRender(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/admin/api/connections" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(`{"connections":[
		 {"conn":1,"client_id":"c-1","user":"alice","remote_addr":"127.0.0.1:5000","subscriptions":["orders#0","orders#1"]},
		 {"conn":2,"user":"@node","remote_addr":"127.0.0.1:5001","subscriptions":["orders#2 (forwarded)"],
		  "forwarded":{"origin_node":"n2","acting_user":"bob","summary":"via node n2 for user bob"}},
		 {"conn":3,"client_id":"c-3","remote_addr":"127.0.0.1:5002","subscriptions":[],"upstreams":["n3","n4"]}]}`))
	}))
	defer srv.Close()
	r := ctl(t, "", "--admin", strings.TrimPrefix(srv.URL, "http://"), "connections")
	mustOK(t, r, "connections")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 6 {
		t.Fatalf("connections table:\n%s", r.stdout)
	}
	for i, want := range [][]string{
		{"CONN", "CLIENT", "USER", "REMOTE", "SUBSCRIPTIONS", "FORWARDING"},
		{"1", "c-1", "alice", "127.0.0.1:5000", "2", "-"},
		{"2", "-", "@node", "127.0.0.1:5001", "1", "via node n2 for user bob"},
		{"3", "c-3", "-", "127.0.0.1:5002", "0", "to owners n3,n4"},
	} {
		if got := strings.Join(strings.Fields(lines[i]), " "); got != strings.Join(want, " ") {
			t.Errorf("line %d: %q, want %q", i, got, strings.Join(want, " "))
		}
	}
	if lines[5] != "3 connection(s)" {
		t.Errorf("last line %q", lines[5])
	}
}
