package broker

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/config"
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
	awaitPlaced(t, bs[0], 10*time.Second, "spread")
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
