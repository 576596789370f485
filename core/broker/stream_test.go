package broker

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/config"
	"github.com/fibrilgo/fibril/transport/faultproxy"
)

// A stream through the Go client across a broker restart: the client's
// durable stream subscription subscribes again by itself (S-83) and
// continues from the broker-side cursor its acks committed (S-74, S-75),
// and an unnamed one continues after the last record it received.
func TestStreamSubscriptionsSurviveABrokerRestart(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	start := func() *Broker {
		t.Helper()
		cfg, _, err := config.Load([]string{"--config=", "--server.data_dir=" + dir, "--broker.listener.bind=" + addr,
			"--admin.listener.bind=127.0.0.1:0"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Start(cfg, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	b := start()
	defer func() { _ = b.Shutdown() }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := dialClient(ctx, t, b)
	if _, err := c.DeclareStream(ctx, client.StreamSpec{Topic: "events", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	pub := c.Publisher("events", client.PublisherOptions{})
	var p0 uint32
	publish := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			off, err := pub.PublishConfirmed(ctx, client.Message{Partition: &p0, Payload: []byte(fmt.Sprint("m", i))})
			if err != nil || off != uint64(i) {
				t.Fatalf("publish m%d: offset %d, %v", i, off, err)
			}
		}
	}
	publish(0, 5)
	durable, err := c.SubscribeStream(ctx, "events", client.StreamOptions{DurableName: "billing", Partitions: []uint32{0}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SubscribeStream(ctx, "events", client.StreamOptions{Partitions: []uint32{0}}); err == nil {
		t.Fatal("a second stream subscription of one partition on one Client was accepted")
	}
	c2 := dialClient(ctx, t, b) // one subscription per partition and connection
	unnamed, err := c2.SubscribeStream(ctx, "events", client.StreamOptions{Start: client.StartAt(1), Partitions: []uint32{0}})
	if err != nil {
		t.Fatal(err)
	}
	next := func(s *client.Subscription, want string, ack bool) {
		t.Helper()
		d, err := s.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(d.Payload) != want || d.Tag != d.Offset {
			t.Fatalf("got %q (offset %d, tag %d), want %s", d.Payload, d.Offset, d.Tag, want)
		}
		if ack {
			if err := d.Ack(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range 3 {
		next(durable, fmt.Sprint("m", i), true)
	}
	next(unnamed, "m1", false) // m2 … m4 stay in the client's buffer
	// The acks reach the broker before it stops: a ping after them.
	if _, err := c.Topology(ctx, ""); err != nil {
		t.Fatal(err)
	}

	if err := b.Shutdown(); err != nil {
		t.Fatal(err)
	}
	b = start()
	publish(5, 6)
	next(durable, "m3", false) // the cursor is after m2
	next(durable, "m4", false)
	next(durable, "m5", false)
	for _, m := range []string{"m2", "m3", "m4", "m5"} { // nothing it had not handed out is skipped
		next(unnamed, m, false)
	}
}

// A network blip (the connection reset, the session resumed within its
// grace): the broker ended the stream subscriptions with the old
// connection (S-83), the client subscribes them again, and a named one
// neither skips nor repeats what its cursor says: the records buffered on
// the client past the cursor are dropped and sent again.
func TestStreamSubscriptionAfterAConnectionReset(t *testing.T) {
	b := startBroker(t)
	proxy := faultproxy.NewTCP(t, b.BrokerAddr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{Addrs: []string{proxy.Addr()}, Username: "fibril", Password: "fibril", Dial: loopbackOnly(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.DeclareStream(ctx, client.StreamSpec{Topic: "events", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	var p0 uint32
	pub := c.Publisher("events", client.PublisherOptions{})
	for i := range 5 {
		if _, err := pub.PublishConfirmed(ctx, client.Message{Partition: &p0, Payload: []byte(fmt.Sprint("m", i))}); err != nil {
			t.Fatal(err)
		}
	}
	s, err := c.SubscribeStream(ctx, "events", client.StreamOptions{DurableName: "n", Partitions: []uint32{0}})
	if err != nil {
		t.Fatal(err)
	}
	got := func() string {
		t.Helper()
		d, err := s.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return string(d.Payload)
	}
	d, err := s.Next(ctx)
	if err != nil || string(d.Payload) != "m0" {
		t.Fatalf("first %v %v", d, err)
	}
	if err := d.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Topology(ctx, ""); err != nil { // the ack is applied
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // m1 … m4 arrive in the client's buffer
	proxy.Reset()
	// A confirmed publish after the reset travels on the new connection,
	// so the client has reconnected (and dropped its buffer) by then.
	if _, err := pub.PublishConfirmed(ctx, client.Message{Partition: &p0, Payload: []byte("m5")}); err != nil {
		t.Fatal(err)
	}
	var seq []string
	for range 5 {
		seq = append(seq, got())
	}
	if fmt.Sprint(seq) != "[m1 m2 m3 m4 m5]" {
		t.Fatalf("after the reset got %v, want [m1 m2 m3 m4 m5]", seq)
	}
	metrics := scrape(t, b)
	for _, want := range []string{"fibril_stream_published_total 6", "fibril_stream_cursor_commits_total 1"} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("metrics lack %q", want)
		}
	}
	if !regexp.MustCompile(`(?m)^fibril_stream_delivered_total (9|[1-9][0-9])$`).MatchString(metrics) {
		t.Errorf("fibril_stream_delivered_total below 9 (m0…m4, then m1…m5 again): %s", regexp.MustCompile(`(?m)^fibril_stream_delivered_total .*$`).FindString(metrics))
	}
}
