package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The tests share one real broker, built once and started with loopback
// binds on port 0 and a temporary data directory.
var (
	brokerAddr string
	adminAddr  string
	brokerPID  int
)

// testBrokerStamp is the test broker's build stamp.
const testBrokerStamp = "-X github.com/fibrilgo/fibril/core/buildinfo.version=v9.8.7-test" +
	" -X github.com/fibrilgo/fibril/core/buildinfo.revision=0123456789abcdef0123" +
	" -X github.com/fibrilgo/fibril/core/buildinfo.date=2026-12-04T00:00:00Z"

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "fibrilctl-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "fibril")
	// Stamped as a release build is (scripts/release.sh), so that
	// TestVersion sees the linker's stamps come through.
	build := exec.Command("go", "build", "-ldflags", testBrokerStamp, "-o", bin, "github.com/fibrilgo/fibril/cmd/fibril")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build broker:", err)
		return 1
	}
	stop, err := startBroker(bin, filepath.Join(dir, "data"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "start broker:", err)
		return 1
	}
	code := m.Run()
	if err := stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop broker:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{}, exitUsage, "usage:"},
		{[]string{"frobnicate"}, exitUsage, "unknown command"},
		{[]string{"publish", "hello"}, exitUsage, "--topic is required"},
		{[]string{"publish", "--topic"}, exitUsage, "flag needs an argument"},
		{[]string{"consume", "--topic", "x", "--nack", "--fail"}, exitUsage, "exclusive"},
		{[]string{"declare", "--topic", "x", "--dlq", "elsewhere"}, exitUsage, "--dlq must be"},
		{[]string{"declare", "--stream", "--topic", "x", "--group", "g"}, exitUsage, "applies to queues"},
		{[]string{"consume", "--topic", "x", "--durable", "d"}, exitUsage, "apply to streams"},
		{[]string{"consume", "--stream", "--topic", "x", "--start", "yesterday"}, exitUsage, "--start"},
		{[]string{"consume", "--stream", "--topic", "x", "--filter", "novalue"}, exitUsage, "key=pattern"},
		{[]string{"bench", "--size", "10"}, exitUsage, "--size must be at least"},
		{[]string{"bench", "--queues", "0"}, exitUsage, "--queues must be at least 1"},
		{[]string{"users"}, exitUsage, "subcommand"},
		{[]string{"help"}, exitOK, ""},
		{[]string{"publish", "--help"}, exitOK, ""},
	} {
		r := ctl(t, "", tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%q: exit %d (want %d), stderr %q (want %q)", tc.args, r.code, tc.code, r.stderr, tc.want)
		}
	}
	if r := ctl(t, "", "publish", "--help"); !strings.Contains(r.stdout, "--topic T") {
		t.Errorf("publish --help printed %q", r.stdout)
	}
}

func TestParseArgsInterleaved(t *testing.T) {
	g := globals{}
	fs := newFlagSet("x", "", &g, &env{stdout: io.Discard, stderr: io.Discard, getenv: os.Getenv})
	n := fs.Int("n", 0, "")
	pos, err := parseArgs(fs, []string{"a", "--n", "3", "b", "--addr", "h:1", "--", "--n", "c"})
	if err != nil || *n != 3 || g.addr != "h:1" || strings.Join(pos, " ") != "a b --n c" {
		t.Fatalf("pos %q n %d addr %q err %v", pos, *n, g.addr, err)
	}
}

func TestDeclarePublishConsume(t *testing.T) {
	// The broker is shared by the whole test binary: a fresh topic per run
	// keeps the offsets below true under -count.
	topic := fmt.Sprintf("orders-%d", time.Now().UnixNano())
	mustOK(t, ctl(t, "", "declare", "--topic", topic, "--partitions", "3", "--dlq", "named:orders-dead/g", "--max-retries", "5", "--ttl", "1h"), "declare")
	if r := ctl(t, "", "declare", "--topic", topic, "--partitions", "3"); r.code != 0 || !strings.Contains(r.stdout, "3 partitions") {
		t.Fatalf("redeclare: %+v", r)
	}
	// A different count conflicts: the broker's code and message are shown.
	r := ctl(t, "", "declare", "--topic", topic, "--partitions", "5")
	if r.code != exitFail || !strings.Contains(r.stderr, "code 409 (conflict)") {
		t.Fatalf("conflicting declare: %+v", r)
	}

	r = ctl(t, "", "publish", "--topic", topic, "--partition", "2", "--header", "k=v", "--header", "fibril.client.trace=t1",
		"--content-type", "application/json", `{"n":1}`, "--count", "2")
	mustOK(t, r, "publish")
	if r.stdout != "partition=2 offset=0\npartition=2 offset=1\n" {
		t.Fatalf("publish printed %q", r.stdout)
	}
	mustOK(t, ctl(t, "from stdin\n", "publish", "--topic", topic, "--partition", "1"), "publish stdin")
	r = ctl(t, "l1\nl2\n", "publish", "--topic", topic, "--partition", "0", "--lines")
	mustOK(t, r, "publish --lines")
	if strings.Count(r.stdout, "offset=") != 2 {
		t.Fatalf("--lines printed %q", r.stdout)
	}
	mustOK(t, ctl(t, "", "publish", "--topic", topic, "--partition", "0", "--no-confirm", "bin\x00ary"), "publish --no-confirm")

	r = ctl(t, "", "consume", "--topic", topic, "--partitions", "0,1,2", "--count", "6", "--json")
	mustOK(t, r, "consume")
	var got []deliveryJSON
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	for dec.More() {
		var d deliveryJSON
		if err := dec.Decode(&d); err != nil {
			t.Fatalf("consume --json output: %v\n%s", err, r.stdout)
		}
		got = append(got, d)
	}
	if len(got) != 6 {
		t.Fatalf("got %d deliveries:\n%s", len(got), r.stdout)
	}
	byPayload := map[string]deliveryJSON{}
	for _, d := range got {
		if d.Payload == nil {
			t.Fatalf("payload missing: %+v", d)
		}
		byPayload[*d.Payload] = d
		if d.Settled != "ack" || d.PayloadBase64 == "" {
			t.Fatalf("delivery %+v", d)
		}
	}
	j := byPayload[`{"n":1}`]
	if j.Partition != 2 || j.ContentType != "application/json" || j.Headers["k"] != "v" || j.Headers["fibril.client.trace"] != "t1" {
		t.Fatalf("json message: %+v", j)
	}
	for _, p := range []string{"from stdin\n", "l1", "l2", "bin\x00ary"} {
		if _, ok := byPayload[p]; !ok {
			t.Errorf("payload %q not delivered; got %v", p, got)
		}
	}
	// Everything was acked: nothing is left.
	r = ctl(t, "", "consume", "--topic", topic, "--partitions", "0,1,2", "--wait", "300ms")
	if r.code != 0 || r.stdout != "" {
		t.Fatalf("after acking everything: %+v", r)
	}
}

// A stream through the CLI: every consumer reads every record (fan-out),
// --start picks the position, --filter the records, and a --durable name
// continues where its acknowledgements left it.
func TestStreamDeclarePublishConsume(t *testing.T) {
	topic := fmt.Sprintf("events-%d", time.Now().UnixNano())
	mustOK(t, ctl(t, "", "declare", "--stream", "--topic", topic, "--partitions", "1", "--max-records", "1000"), "declare --stream")
	for i, region := range []string{"eu-west", "us-east", "eu-north", "ap-south"} {
		r := ctl(t, "", "publish", "--topic", topic, "--partition", "0", "--header", "region="+region, fmt.Sprint("e", i))
		mustOK(t, r, "publish to a stream")
		if want := fmt.Sprintf("partition=0 offset=%d\n", i); r.stdout != want {
			t.Fatalf("publish printed %q, want %q", r.stdout, want)
		}
	}
	consume := func(args ...string) []string {
		t.Helper()
		r := ctl(t, "", append([]string{"consume", "--stream", "--topic", topic, "--json"}, args...)...)
		mustOK(t, r, "consume --stream")
		var out []string
		dec := json.NewDecoder(strings.NewReader(r.stdout))
		for dec.More() {
			var d deliveryJSON
			if err := dec.Decode(&d); err != nil {
				t.Fatalf("consume --json output: %v\n%s", err, r.stdout)
			}
			if d.Tag != d.Offset {
				t.Fatalf("stream delivery tag %d, offset %d", d.Tag, d.Offset)
			}
			out = append(out, *d.Payload)
		}
		return out
	}
	want := func(got []string, w ...string) {
		t.Helper()
		if strings.Join(got, ",") != strings.Join(w, ",") {
			t.Fatalf("got %v, want %v", got, w)
		}
	}
	want(consume("--start", "earliest", "--count", "4"), "e0", "e1", "e2", "e3")
	want(consume("--start", "earliest", "--count", "4"), "e0", "e1", "e2", "e3") // reading removed nothing
	want(consume("--start", "offset:2", "--count", "2"), "e2", "e3")
	want(consume("--start", "back:1", "--count", "1"), "e3")
	want(consume("--start", "earliest", "--filter", "region=eu-*", "--count", "2"), "e0", "e2")
	want(consume("--start", "latest", "--wait", "200ms"))
	want(consume("--durable", "audit", "--count", "2"), "e0", "e1")
	want(consume("--durable", "audit", "--count", "2"), "e2", "e3") // the acks committed the cursor
	want(consume("--durable", "audit", "--wait", "200ms"))
}

func TestConsumeNackRedelivers(t *testing.T) {
	mustOK(t, ctl(t, "", "publish", "--topic", "retry-me", "again"), "publish")
	r := ctl(t, "", "consume", "--topic", "retry-me", "--count", "1", "--nack")
	mustOK(t, r, "consume --nack")
	if !strings.HasSuffix(strings.TrimSpace(r.stdout), "\tagain") {
		t.Fatalf("text output %q", r.stdout)
	}
	r = ctl(t, "", "consume", "--topic", "retry-me", "--count", "1", "--json", "--wait", "10s")
	mustOK(t, r, "consume after nack")
	var d deliveryJSON
	if err := json.Unmarshal([]byte(r.stdout), &d); err != nil || d.Retries != 1 || *d.Payload != "again" {
		t.Fatalf("redelivery %q: %+v %v", r.stdout, d, err)
	}
}

func TestBrokerErrorsShowWireCode(t *testing.T) {
	r := ctl(t, "", "publish", "--topic", "orders2", "--header", "fibril.retries=1", "x")
	if r.code != exitFail || !strings.Contains(r.stderr, "code 400 (bad_request)") || !strings.Contains(r.stderr, "reserved") {
		t.Fatalf("reserved header: %+v", r)
	}
	r = ctl(t, "", "topology", "--user", "nobody", "--password", "wrong")
	if r.code != exitFail || !strings.Contains(r.stderr, "code 401 (unauthorized)") {
		t.Fatalf("bad login: %+v", r)
	}
	r = ctl(t, "", "topology", "--addr", "127.0.0.1:1", "--timeout", "2s")
	if r.code != exitFail || !strings.Contains(r.stderr, "connect to 127.0.0.1:1") {
		t.Fatalf("no broker: %+v", r)
	}
}

func TestTopology(t *testing.T) {
	mustOK(t, ctl(t, "", "declare", "--stream", "--topic", "events", "--partitions", "2"), "declare stream")
	r := ctl(t, "", "topology")
	mustOK(t, r, "topology")
	if !strings.HasPrefix(r.stdout, "generation ") {
		t.Fatalf("topology table: %q", r.stdout)
	}
	r = ctl(t, "", "topology", "--json", "--topic", "events")
	mustOK(t, r, "topology --json")
	var tj topologyJSON
	if err := json.Unmarshal([]byte(r.stdout), &tj); err != nil || tj.Queues == nil || tj.Streams == nil {
		t.Fatalf("topology --json %q: %v", r.stdout, err)
	}
}

func TestUsers(t *testing.T) {
	mustOK(t, ctl(t, "", "users", "add", "alice", "--password", "alice-secret"), "users add")
	mustOK(t, ctl(t, "bob-secret\n", "users", "add", "bob"), "users add (stdin)")
	r := ctl(t, "", "users", "list", "--json")
	mustOK(t, r, "users list")
	var list struct {
		Users []userEntry `json:"users"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, u := range list.Users {
		names[u.Username] = !u.Created.IsZero()
	}
	if !names["alice"] || !names["bob"] {
		t.Fatalf("users list: %q", r.stdout)
	}
	if r := ctl(t, "", "users", "list"); !strings.Contains(r.stdout, "USERNAME") || !strings.Contains(r.stdout, "alice") {
		t.Fatalf("users list table: %q", r.stdout)
	}
	// The new user can log in (and a wrong password cannot).
	mustOK(t, ctl(t, "", "topology", "--user", "bob", "--password", "bob-secret"), "login as bob")
	if r := ctl(t, "", "topology", "--user", "bob", "--password", "nope"); r.code != exitFail {
		t.Fatalf("wrong password accepted: %+v", r)
	}
	// passwd: the new password works, the old one no longer does.
	r = ctl(t, "bob-new-secret\n", "users", "passwd", "bob")
	if r.code != 0 || !strings.Contains(r.stdout, "password of user bob changed") {
		t.Fatalf("users passwd: %+v", r)
	}
	mustOK(t, ctl(t, "", "topology", "--user", "bob", "--password", "bob-new-secret"), "login with the new password")
	if r := ctl(t, "", "topology", "--user", "bob", "--password", "bob-secret"); r.code != exitFail {
		t.Fatalf("the old password still works: %+v", r)
	}
	if r := ctl(t, "", "users", "passwd", "nobody", "--password", "x"); r.code != exitFail || !strings.Contains(r.stderr, "HTTP 404") {
		t.Fatalf("passwd of an unknown user: %+v", r)
	}
	if r := ctl(t, "", "users", "add", "alice", "--password", "x"); r.code != exitFail || !strings.Contains(r.stderr, "HTTP 409") {
		t.Fatalf("duplicate add: %+v", r)
	}
	// Permissions: none to start with; allow adds entries; --none, --clear.
	if r := ctl(t, "", "users", "permissions", "alice"); r.code != 0 || !strings.Contains(r.stdout, "unrestricted") {
		t.Fatalf("users permissions: %+v", r)
	}
	r = ctl(t, "", "users", "allow", "alice", "--topic", "orders.*", "--topic", "audit", "--actions", "publish,consume")
	if r.code != 0 || !strings.Contains(r.stdout, "publish,consume  orders.* audit") {
		t.Fatalf("users allow: %+v", r)
	}
	if r := ctl(t, "", "users", "allow", "alice", "--topic", "x", "--actions", "delete"); r.code != exitFail || !strings.Contains(r.stderr, "unknown action") {
		t.Fatalf("an unknown action: %+v", r)
	}
	mustOK(t, ctl(t, "", "users", "permissions", "alice", "--none"), "users permissions --none")
	if r := ctl(t, "", "topology", "--user", "alice", "--password", "alice-secret"); r.code != 0 {
		t.Fatalf("TOPOLOGY needs no permission: %+v", r)
	}
	if r := ctl(t, "", "publish", "--topic", "orders.eu", "--user", "alice", "--password", "alice-secret", "x"); r.code != exitFail || !strings.Contains(r.stderr, "403") {
		t.Fatalf("publish with an empty list: %+v", r)
	}
	r = ctl(t, "", "users", "permissions", "alice", "--clear", "--json")
	if r.code != 0 || !strings.Contains(r.stdout, `"permissions": null`) {
		t.Fatalf("users permissions --clear: %+v", r)
	}
	mustOK(t, ctl(t, "", "users", "remove", "alice"), "users remove")
	mustOK(t, ctl(t, "", "users", "remove", "bob"), "users remove")
	r = ctl(t, "", "users", "remove", "alice")
	if r.code != exitFail || !strings.Contains(r.stderr, "HTTP 404 not_found") {
		t.Fatalf("remove twice: %+v", r)
	}
	if r := ctl(t, "", "users", "list", "--admin", "127.0.0.1:1", "--timeout", "2s"); r.code != exitFail {
		t.Fatalf("no admin listener: %+v", r)
	}
}

// benchJSON runs a bench with --json and decodes its single object.
func benchJSON(t *testing.T, args ...string) map[string]any {
	t.Helper()
	r := ctl(t, "", append([]string{"bench", "--json", "--progress=false"}, args...)...)
	mustOK(t, r, "bench")
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("bench output %q: %v", r.stdout, err)
	}
	if dec.More() {
		t.Fatalf("more than one JSON value on stdout: %q", r.stdout)
	}
	for _, k := range []string{"msgs_per_sec", "mb_per_sec", "confirm_p50_us", "confirm_p99_us", "e2e_p50_us", "e2e_p99_us",
		"e2e_p999_us", "sent", "confirmed", "delivered", "lost", "duplicates", "partitions", "size", "producers", "consumers",
		"window", "prefetch", "duration_s", "rate", "max_ahead", "mode"} {
		if _, ok := m[k]; !ok {
			t.Errorf("bench JSON lacks %q", k)
		}
	}
	return m
}

func num(m map[string]any, k string) float64 { v, _ := m[k].(float64); return v }

func checkComplete(t *testing.T, m map[string]any, confirmed bool) {
	t.Helper()
	sent, conf, del := num(m, "sent"), num(m, "confirmed"), num(m, "delivered")
	if sent == 0 || del != sent || (confirmed && conf != sent) || num(m, "lost") != 0 || num(m, "duplicates") != 0 ||
		num(m, "foreign") != 0 || num(m, "publish_errors") != 0 {
		t.Fatalf("incomplete run: sent %v confirmed %v delivered %v lost %v duplicates %v foreign %v errors %v",
			sent, conf, del, num(m, "lost"), num(m, "duplicates"), num(m, "foreign"), m["error_samples"])
	}
	if num(m, "msgs_per_sec") <= 0 || num(m, "e2e_p50_us") <= 0 || num(m, "e2e_p99_us") < num(m, "e2e_p50_us") {
		t.Fatalf("implausible numbers: %v", m)
	}
	if confirmed && num(m, "confirm_p50_us") <= 0 {
		t.Fatalf("no confirm latency: %v", m)
	}
}

func TestBenchConfirmed(t *testing.T) {
	m := benchJSON(t, "--topic", "bench-confirmed", "--partitions", "2", "--producers", "2", "--consumers", "2",
		"--window", "32", "--confirmed", "--prefetch", "64", "--duration", "2s", "--max-ahead", "256", "--warmup", "200ms")
	checkComplete(t, m, true)
	if num(m, "partitions") != 2 || m["confirm_mode"] != true || m["coalesce"] != true {
		t.Fatalf("parameters: %v", m)
	}
	// The client batched its writes: fewer write(2) calls than frames.
	cs, _ := m["client_stats"].(map[string]any)
	if num(cs, "coalesced_frames") == 0 || num(cs, "coalesced_syscalls") == 0 || num(cs, "coalesced_syscalls") > num(cs, "coalesced_frames") {
		t.Fatalf("client write stats: %v", m["client_stats"])
	}
	if num(m, "cpu_per_msg_us") <= 0 {
		t.Fatalf("no CPU per message: %v", m)
	}
	// --coalesce is a deprecated no-op (scripts may still pass it).
	r := ctl(t, "", "bench", "--coalesce", "--json", "--progress=false", "--consumers", "0", "--duration", "200ms")
	if r.code != 0 || !strings.Contains(r.stderr, "--coalesce is deprecated") {
		t.Fatalf("--coalesce: %+v", r)
	}
}

// --queues spreads the messages over several queues; a queue that
// already exists with another partition count (here auto-created with one
// by a subscribe, S-21) is used as it is.
func TestBenchQueues(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	if r := ctlCtx(ctx, "", "consume", "--topic", "bench-queues-1"); r.code != 0 {
		t.Fatalf("consume to auto-create: %+v", r)
	}
	r := ctl(t, "", "bench", "--json", "--progress=false", "--topic", "bench-queues", "--queues", "3", "--partitions", "2",
		"--producers", "2", "--consumers", "2", "--window", "16", "--confirmed", "--duration", "1s",
		"--server-pid", fmt.Sprint(brokerPID))
	mustOK(t, r, "bench --queues 3")
	var m map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
		t.Fatalf("bench output %q: %v", r.stdout, err)
	}
	checkComplete(t, m, true)
	if num(m, "queues") != 3 || !strings.Contains(r.stderr, "queue bench-queues-1 already has 1 partitions (asked for 2)") {
		t.Fatalf("queues %v, stderr %q", m["queues"], r.stderr)
	}
	// The broker's CPU over the window, read from /proc (a second of
	// confirmed publishing costs it well over the 10 ms resolution).
	if _, err := os.Stat("/proc/self/stat"); err == nil && (num(m, "server_cpu_s") <= 0 || num(m, "server_cpu_per_msg_us") <= 0) {
		t.Fatalf("no broker CPU: server_cpu_s %v server_cpu_per_msg_us %v", m["server_cpu_s"], m["server_cpu_per_msg_us"])
	}
	// More consumers than queues: each queue is still read.
	m = benchJSON(t, "--topic", "bench-queues-more", "--queues", "2", "--partitions", "3", "--consumers", "3",
		"--window", "8", "--confirmed", "--duration", "500ms")
	checkComplete(t, m, true)
	if num(m, "queues") != 2 || num(m, "partitions") != 3 {
		t.Fatalf("parameters: %v", m)
	}
}

func TestBenchPacedFireAndForget(t *testing.T) {
	m := benchJSON(t, "--partitions", "2", "--rate", "1000", "--duration", "1s", "--auto-ack")
	checkComplete(t, m, false)
	// Paced open loop: about rate × duration messages.
	if s := num(m, "sent"); s < 900 || s > 1100 {
		t.Fatalf("sent %v at 1000 msgs/s for 1s", s)
	}
	if _, ok := m["send_lag_p50_us"]; !ok {
		t.Fatalf("no send lag in a paced run: %v", m)
	}
}

func TestBenchRTT(t *testing.T) {
	m := benchJSON(t, "--mode", "rtt", "--duration", "1s")
	checkComplete(t, m, true)
	if num(m, "rtt_p50_us") < num(m, "confirm_p50_us") || num(m, "rtt_p50_us") < num(m, "e2e_p50_us") {
		t.Fatalf("round trip shorter than a phase: %v", m)
	}
}

func TestBenchFsync(t *testing.T) {
	r := ctl(t, "", "bench", "--mode", "fsync", "--fsync-dir", t.TempDir(), "--duration", "200ms", "--json")
	mustOK(t, r, "bench fsync")
	var m map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil || num(m, "syncs") == 0 || num(m, "fsync_p50_us") <= 0 {
		t.Fatalf("fsync bench %q: %v", r.stdout, err)
	}
}

// bench --mode idle opens the connections, each logged in, and reads what
// they cost the broker from its /metrics: a session is a reader and a
// writer goroutine, so each connection adds about two.
func TestBenchIdle(t *testing.T) {
	r := ctl(t, "", "bench", "--mode", "idle", "--connections", "6", "--duration", "200ms", "--json")
	mustOK(t, r, "bench idle")
	var m map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
		t.Fatalf("idle bench %q: %v", r.stdout, err)
	}
	if num(m, "connections") != 6 || num(m, "goroutines_per_conn") < 1.5 || num(m, "goroutines_per_conn") > 4 {
		t.Fatalf("idle bench: %v", m)
	}
	if r := ctl(t, "", "bench", "--mode", "idle", "--connections", "0"); r.code == 0 || !strings.Contains(r.stderr, "--connections") {
		t.Fatalf("--connections 0: %+v", r)
	}
}

func TestInterruptStopsCleanly(t *testing.T) {
	// consume without --count runs until interrupted, then exits 0.
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	r := ctlCtx(ctx, "", "consume", "--topic", "quiet")
	if r.code != 0 || !strings.Contains(r.stderr, "0 message(s) consumed") {
		t.Fatalf("interrupted consume: %+v", r)
	}
	// Interrupted before the subscription is open (here: before the
	// dial): the same clean stop.
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	r = ctlCtx(ctx, "", "consume", "--topic", "quiet")
	if r.code != 0 || !strings.Contains(r.stderr, "interrupted before the subscription was open") ||
		!strings.Contains(r.stderr, "0 message(s) consumed") {
		t.Fatalf("consume interrupted before it subscribed: %+v", r)
	}
	// A long bench stops early and still reports. It is interrupted once
	// the broker has confirmed some of its publishes (a fixed delay can
	// land before it connects on a loaded machine, as CI saw).
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	confirms0 := confirmsCounted(t)
	go func() {
		defer cancel()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
			if confirmsCounted(nil) > confirms0 {
				time.Sleep(200 * time.Millisecond)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	start := time.Now()
	r = ctlCtx(ctx, "", "bench", "--json", "--progress=false", "--confirmed", "--window", "8", "--duration", "1m")
	if el := time.Since(start); el > 15*time.Second {
		t.Fatalf("interrupted bench took %v", el)
	}
	var m map[string]any
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &m) != nil || num(m, "sent") == 0 || m["interrupted"] != true {
		t.Fatalf("interrupted bench: %+v", r)
	}
	checkComplete(t, m, true) // it drained: nothing counted as lost
}

// confirmsCounted reads how many confirmed publishes the test broker has
// answered (the count of fibril_publish_confirm_latency_seconds); -1 when
// /metrics cannot be read, which fails tb unless it is nil.
func confirmsCounted(tb testing.TB) float64 {
	fail := func(err error) float64 {
		if tb != nil {
			tb.Fatalf("read /metrics: %v", err)
		}
		return -1
	}
	resp, err := http.Get("http://" + adminAddr + "/metrics")
	if err != nil {
		return fail(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fail(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "fibril_publish_confirm_latency_seconds_count "); ok {
			n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return fail(err)
			}
			return n
		}
	}
	return 0 // no confirmed publish yet: the series is not exported
}

// settings get|set go through /admin/api/runtime-settings (S-162); a set
// keeps the other settings and bumps the version.
func TestSettings(t *testing.T) {
	r := ctl(t, "", "settings", "get")
	mustOK(t, r, "settings get")
	if !strings.Contains(r.stdout, "connection.reconnect_grace_ms = ") || !strings.HasPrefix(r.stdout, "version ") {
		t.Fatalf("settings get: %q", r.stdout)
	}
	mustOK(t, ctl(t, "", "settings", "set", "connection.reconnect_grace_ms=4321", "delivery.expiry_batch_max=100"), "settings set")
	r = ctl(t, "", "settings", "get")
	mustOK(t, r, "settings get")
	for _, want := range []string{"connection.reconnect_grace_ms = 4321", "delivery.expiry_batch_max = 100", "delivery.inflight_ttl_ms = 30000"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("after set, no %q in %q", want, r.stdout)
		}
	}
	for _, bad := range [][]string{
		{"settings", "set", "connection.nope=1"},
		{"settings", "set", "nogroup=1"},
		{"settings", "set", "connection.reconnect_grace_ms=soon"},
		{"settings", "frobnicate"},
	} {
		if r := ctl(t, "", bad...); r.code != exitUsage {
			t.Errorf("%v: exit %d, want %d (stderr %q)", bad, r.code, exitUsage, r.stderr)
		}
	}
	// A value the broker refuses is a 400 from the API (exit 1).
	if r := ctl(t, "", "settings", "set", "partitioning.default_partition_count=0"); r.code != exitFail || !strings.Contains(r.stderr, "default_partition_count") {
		t.Fatalf("invalid value: exit %d, stderr %q", r.code, r.stderr)
	}
	// A string setting is sent as written; the broker checks its form.
	mustOK(t, ctl(t, "", "settings", "set", "replication.durability=replica_durable:2"), "settings set durability")
	if r := ctl(t, "", "settings", "get"); !strings.Contains(r.stdout, "replication.durability = replica_durable:2") {
		t.Fatalf("after setting the durability: %q", r.stdout)
	}
	if r := ctl(t, "", "settings", "set", "replication.durability=quorum"); r.code != exitFail || !strings.Contains(r.stderr, "replication.durability") {
		t.Fatalf("invalid durability: exit %d, stderr %q", r.code, r.stderr)
	}
	// A boolean setting takes true or false.
	mustOK(t, ctl(t, "", "settings", "set", "routing.expose_private_endpoints=true"), "settings set a boolean")
	if r := ctl(t, "", "settings", "get"); !strings.Contains(r.stdout, "routing.expose_private_endpoints = true") {
		t.Fatalf("after setting a boolean: %q", r.stdout)
	}
	if r := ctl(t, "", "settings", "set", "routing.expose_private_endpoints=maybe"); r.code != exitUsage {
		t.Fatalf("a boolean set to maybe: exit %d, stderr %q", r.code, r.stderr)
	}
}

// cluster and topology --owners need a cluster: a standalone broker's admin
// API answers 404, which the CLI reports.
func TestClusterCommandsOnStandalone(t *testing.T) {
	for _, args := range [][]string{{"cluster"}, {"topology", "--owners"}} {
		r := ctl(t, "", args...)
		if r.code != exitFail || !strings.Contains(r.stderr, "standalone") {
			t.Errorf("%v on a standalone broker: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
}

// cluster and topology --owners render GET /admin/api/topology: here from a
// canned answer, in the shape core/broker serves.
func TestClusterCommandsRender(t *testing.T) {
	serve := func(answer string) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/admin/api/topology" {
				http.NotFound(w, r)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(answer))
		}))
	}
	// node-3's admin API: it owns orders#3 and knows its follower's tail.
	srv3 := serve(`{"self":"node-3","partitions":[{"topic":"orders","kind":"queue","partition":3,"owner":"node-3",
	 "followers":[{"node":"node-1","live":true,"in_sync":true,"durable_next":77,"lag_records":3}]}]}`)
	defer srv3.Close()
	answer := `{"self":"node-1","index":40,"generation":31,"replication":{"target_followers":2,"under_replicated":1},
	 "nodes":[{"id":"node-1","live":true,"visibility":"public","draining":false,"peer_addr":"127.0.0.1:9876","admin_addr":"127.0.0.1:8081","labels":{"fibril/advertise":"127.0.0.1:9876"},"controller":true},
	          {"id":"node-2","live":false,"visibility":"private","draining":true,"peer_addr":"127.0.0.1:9877","admin_addr":"127.0.0.1:8082","labels":{}},
	          {"id":"node-3","live":true,"visibility":"private","peer_addr":"127.0.0.1:9878","admin_addr":"` + strings.TrimPrefix(srv3.URL, "http://") + `","labels":{}}],
	 "partitions":[{"topic":"orders","kind":"queue","partition":0,"owner":"node-1","epoch":1,"written":true,"owner_live":true,"followers":[{"node":"node-2","live":false},{"node":"node-3","live":true,"in_sync":true,"durable_next":500,"lag_records":0}],"client_endpoints":["127.0.0.1:9876"]},
	               {"topic":"orders","kind":"queue","partition":1,"owner":"node-2","epoch":2,"written":false,"owner_live":false,"client_endpoints":[]},
	               {"topic":"orders","kind":"queue","partition":2,"epoch":0,"written":false,"owner_live":false,"client_endpoints":[]},
	               {"topic":"orders","kind":"queue","partition":3,"owner":"node-3","epoch":4,"written":true,"owner_live":true,"followers":[{"node":"node-1","live":true,"in_sync":true}],"client_endpoints":["127.0.0.1:9876"]}]}`
	srv := serve(answer)
	defer srv.Close()
	admin := strings.TrimPrefix(srv.URL, "http://")
	r := ctl(t, "", "--admin", admin, "cluster")
	mustOK(t, r, "cluster")
	for _, want := range []string{"live,controller,self", "dead,draining", "private", "127.0.0.1:9876", "FOLLOWING",
		"under-replicated partitions: 1 (target 2 followers"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("cluster: no %q in\n%s", want, r.stdout)
		}
	}
	r = ctl(t, "", "--admin", admin, "topology", "--owners")
	mustOK(t, r, "topology --owners")
	for _, want := range []string{"node-1", "true", "127.0.0.1:9876", "node-2 (dead)", "(unplaced)", "(bootstrap)",
		"node-2(dead),node-3*(tail=500,lag=0)", "node-1*(tail=77,lag=3)"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("topology --owners: no %q in\n%s", want, r.stdout)
		}
	}
}

// consume --consumer-group joins the queue's exclusive consumer group: the
// member is told its partitions, and gets every message of them.
func TestConsumeConsumerGroup(t *testing.T) {
	topic := fmt.Sprintf("jobs-%d", time.Now().UnixNano())
	mustOK(t, ctl(t, "", "declare", "--topic", topic, "--partitions", "2"), "declare")
	for i := range 4 {
		mustOK(t, ctl(t, "", "publish", "--topic", topic, "--partition", fmt.Sprint(i%2), fmt.Sprint("j", i)), "publish")
	}
	r := ctl(t, "", "consume", "--topic", topic, "--partitions", "0,1", "--consumer-group", "workers", "--count", "4")
	mustOK(t, r, "consume --consumer-group")
	if !strings.Contains(r.stderr, "consumer group workers: partitions [0 1] assigned") {
		t.Fatalf("the member was not told it has both partitions:\n%s", r.stderr)
	}
	if n := strings.Count(r.stdout, "\n"); n != 4 {
		t.Fatalf("consumed %d lines, want 4:\n%s", n, r.stdout)
	}
	r = ctl(t, "", "consume", "--stream", "--topic", topic, "--consumer-group", "workers")
	if r.code != 2 || !strings.Contains(r.stderr, "--consumer-group") {
		t.Fatalf("--consumer-group with --stream: exit %d, %s", r.code, r.stderr)
	}
}
