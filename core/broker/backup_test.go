package broker

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/config"
	"github.com/fibrilgo/fibril/core/queue"
	"github.com/fibrilgo/fibril/core/testkit"
)

// A backup taken while the broker serves, restored into a new data
// directory, starts a broker that holds the same queues, streams, users
// and settings: the unsettled messages (not the acknowledged ones), the
// stream's records and its durable cursor. A directory that is not empty
// is refused, and so is an archive that is not a backup.
func TestBackupAndRestore(t *testing.T) {
	b := startBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := dialClient(ctx, t, b)
	if _, err := c.DeclareQueue(ctx, client.QueueSpec{Topic: "jobs", Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	for p := range uint32(2) {
		publishTo(ctx, t, c, "jobs", p, 5)
	}
	sub, err := c.Subscribe(ctx, "jobs", client.SubscribeOptions{Partitions: []uint32{0}, Prefetch: 3})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 { // m0 … m2 of partition 0 are settled
		d, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	sub.Close()
	if _, err := c.DeclareStream(ctx, client.StreamSpec{Topic: "events", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	publishTo(ctx, t, c, "events", 0, 4)
	ss, err := c.SubscribeStream(ctx, "events", client.StreamOptions{DurableName: "audit", Partitions: []uint32{0}})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		r, err := ss.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	ss.Close()
	if code, body := adminDo(t, b, "POST", "/admin/api/users", `{"username":"kept","password":"kept-secret"}`); code != 201 {
		t.Fatalf("add user: %d %s", code, body)
	}
	c.Close()

	var archive bytes.Buffer
	began := time.Now()
	if err := b.Backup(ctx, &archive); err != nil {
		t.Fatal(err)
	}
	t.Logf("backup: %d bytes in %v", archive.Len(), time.Since(began))
	var m BackupManifest
	tr := tar.NewReader(bytes.NewReader(archive.Bytes()))
	if h, err := tr.Next(); err != nil || h.Name != "backup.json" {
		t.Fatalf("first entry %v %v", h, err)
	}
	if err := json.NewDecoder(tr).Decode(&m); err != nil || len(m.Partitions) != 3 || m.Format != dataFormat {
		t.Fatalf("manifest %+v %v", m, err)
	}

	dir := filepath.Join(t.TempDir(), "restored")
	if _, err := Restore(dir, bytes.NewReader(archive.Bytes())); err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(dir, bytes.NewReader(archive.Bytes())); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("restore into a directory that is not empty: %v", err)
	}
	if _, err := Restore(filepath.Join(t.TempDir(), "x"), strings.NewReader("not a tar")); err == nil {
		t.Fatal("restored something that is not a backup")
	}
	cfg, _, err := config.Load([]string{"--server.data_dir=" + dir, "--broker.listener.bind=127.0.0.1:0", "--admin.listener.bind=127.0.0.1:0"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Start(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Shutdown()
	rc := dialClient(ctx, t, r)
	var got []string
	rsub, err := rc.Subscribe(ctx, "jobs", client.SubscribeOptions{Partitions: []uint32{0, 1}, AutoAck: true})
	if err != nil {
		t.Fatal(err)
	}
	for range 7 {
		d, err := rsub.Next(ctx)
		if err != nil {
			t.Fatalf("after %v: %v", got, err)
		}
		got = append(got, fmt.Sprintf("%d:%s", d.Partition, d.Payload))
	}
	slices.Sort(got)
	if want := []string{"0:m3", "0:m4", "1:m0", "1:m1", "1:m2", "1:m3", "1:m4"}; !slices.Equal(got, want) {
		t.Fatalf("restored messages %v, want %v", got, want)
	}
	rss, err := rc.SubscribeStream(ctx, "events", client.StreamOptions{DurableName: "audit", Partitions: []uint32{0}})
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := rss.Next(ctx); err != nil || string(rec.Payload) != "m2" {
		t.Fatalf("the durable cursor after the restore: %v %v", rec, err)
	}
	if _, body := adminDo(t, r, "GET", "/admin/api/users", ""); !strings.Contains(body, `"kept"`) {
		t.Fatalf("users after the restore: %s", body)
	}
}

// A cluster node's backup holds the partitions it owns and the
// coordination keys.
func TestBackupClusterNode(t *testing.T) {
	bs := startMemCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := dialClient(ctx, t, bs[0])
	if _, err := c.DeclareQueue(ctx, client.QueueSpec{Topic: "spread", Partitions: 6}); err != nil {
		t.Fatal(err)
	}
	awaitPlaced(t, bs[1], 10*time.Second, "spread")
	// The placement can reach bs[1]'s view before its queue manager has
	// applied the declaration; a backup then holds no partition of it yet.
	testkit.Eventually(t, 10*time.Second, "bs[1] knows the queue locally", func() bool {
		return slices.ContainsFunc(bs[1].readyQueues().Queues(), func(q queue.QueueInfo) bool { return q.Key.Topic == "spread" })
	})
	snap := bs[1].cluster.cl.Snapshot()
	want := 0
	for _, p := range snap.Queue("spread", "").Parts {
		if p.Node == bs[1].nodeID {
			want++
		}
	}
	var archive bytes.Buffer
	if err := bs[1].Backup(ctx, &archive); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(&archive)
	var m BackupManifest
	names := map[string]bool{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names[h.Name] = true
		if h.Name == "backup.json" {
			if err := json.NewDecoder(tr).Decode(&m); err != nil {
				t.Fatal(err)
			}
		}
	}
	if m.Node != bs[1].nodeID || len(m.Partitions) != want || !names["cluster.json"] || !names["queues/catalog.json"] {
		t.Fatalf("manifest %+v (want %d partitions), files %v", m, want, names)
	}
}

// How fast a backup copies, beside the baseline of copying the data
// directory's files (what a stopped-broker copy costs) in the same run. A
// measurement, not a pass/fail test: it runs only with FIBRIL_MEASURE=1.
//
//	FIBRIL_MEASURE=1 go test -run TestMeasureBackup -v ./core/broker
func TestMeasureBackup(t *testing.T) {
	if os.Getenv("FIBRIL_MEASURE") != "1" {
		t.Skip("a measurement: set FIBRIL_MEASURE=1 to run it")
	}
	const parts, perPart, size = 4, 25_000, 1024
	b := startBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c := dialClient(ctx, t, b)
	if _, err := c.DeclareQueue(ctx, client.QueueSpec{Topic: "bulk", Partitions: parts}); err != nil {
		t.Fatal(err)
	}
	payload := bytes.Repeat([]byte("x"), size)
	pub := c.Publisher("bulk", client.PublisherOptions{})
	for p := range uint32(parts) {
		for range perPart {
			if err := pub.Publish(ctx, client.Message{Partition: &p, Payload: payload}); err != nil {
				t.Fatal(err)
			}
		}
	}
	publishTo(ctx, t, c, "bulk", 0, 1) // a confirmed one last: everything before it is stored
	var data int64
	_ = filepath.Walk(filepath.Join(b.cfg.Server.DataDir, "queues"), func(_ string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			data += info.Size()
		}
		return nil
	})
	began := time.Now()
	var archive countingWriter
	if err := b.Backup(ctx, &archive); err != nil {
		t.Fatal(err)
	}
	took := time.Since(began)
	began = time.Now()
	copyTree(t, filepath.Join(b.cfg.Server.DataDir, "queues"), filepath.Join(t.TempDir(), "copy"))
	baseline := time.Since(began)
	t.Logf("%d messages of %d B on %d partitions, %.1f MiB in queues/: backup %v (%.0f MiB/s, archive %.1f MiB); plain file copy %v (%.0f MiB/s); backup/copy time ratio %.2f",
		parts*perPart, size, parts, float64(data)/(1<<20), took.Round(time.Millisecond), float64(archive.n)/(1<<20)/took.Seconds(),
		float64(archive.n)/(1<<20), baseline.Round(time.Millisecond), float64(data)/(1<<20)/baseline.Seconds(), took.Seconds()/baseline.Seconds())
}

type countingWriter struct{ n int64 }

func (w *countingWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }

// copyTree copies the files under src to dst, each synced.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		to := filepath.Join(dst, rel)
		if info.IsDir() {
			return os.MkdirAll(to, 0o700)
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(to)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		if err := out.Sync(); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A whole cluster put back from its brokers' backups: every broker is
// backed up while it serves, the cluster is lost, a new one (a new
// coordination store) starts on the restored directories with the same
// node ids, the first broker to join writes the saved catalog and
// assignments, and every message is there to consume.
func TestBackupRestoreWholeCluster(t *testing.T) {
	bs := startMemCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := dialClient(ctx, t, bs[0])
	if _, err := c.DeclareQueue(ctx, client.QueueSpec{Topic: "jobs", Partitions: 6}); err != nil {
		t.Fatal(err)
	}
	awaitPlaced(t, bs[0], 10*time.Second, "jobs")
	for p := range uint32(6) {
		publishTo(ctx, t, c, "jobs", p, 2)
	}
	c.Close()
	var dirs []string
	for i, b := range bs {
		var archive bytes.Buffer
		if err := b.Backup(ctx, &archive); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(t.TempDir(), "restored")
		if _, err := Restore(dir, &archive); err != nil {
			t.Fatalf("restore n%d: %v", i, err)
		}
		dirs = append(dirs, dir)
	}
	for _, b := range bs {
		if err := b.Shutdown(); err != nil {
			t.Fatal(err)
		}
	}

	nbs := startMemClusterWith(t, 3, func(i int) []string { return []string{"--server.data_dir=" + dirs[i]} })
	nc := dialClient(ctx, t, nbs[0])
	sub, err := nc.Subscribe(ctx, "jobs", client.SubscribeOptions{Partitions: []uint32{0, 1, 2, 3, 4, 5}, AutoAck: true})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for len(got) < 12 {
		d, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("after %v: %v", got, err)
		}
		got[fmt.Sprintf("%d:%s", d.Partition, d.Payload)] = true
	}
	for p := range 6 {
		for m := range 2 {
			if !got[fmt.Sprintf("%d:m%d", p, m)] {
				t.Errorf("partition %d message m%d is missing after the restore (got %v)", p, m, got)
			}
		}
	}
	for i, dir := range dirs {
		_, applied := os.Stat(filepath.Join(dir, restoredClusterFile+".applied"))
		_, skipped := os.Stat(filepath.Join(dir, restoredClusterFile+".skipped"))
		if applied != nil && skipped != nil {
			t.Errorf("n%d: the restored cluster metadata was neither applied nor skipped", i)
		}
	}
}
