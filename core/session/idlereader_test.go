//go:build unix

package session

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		done <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-done
	if s == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// An idleReader yields exactly the bytes written — what the handshake read
// ahead first, small reads through its buffer, large ones straight into
// the caller's — holds its buffer only while bytes wait, counts them, and
// ends with io.EOF; a read deadline ends a wait.
func TestIdleReader(t *testing.T) {
	client, server := tcpPair(t)
	m := &Metrics{BytesIn: prometheus.NewCounter(prometheus.CounterOpts{Name: "in"})}
	r, ok := newIdleReader(server, m, []byte("ahead"))
	if !ok {
		t.Fatal("no raw access to a TCP socket")
	}
	want := append([]byte("ahead"), bytes.Repeat([]byte("0123456789"), 5000)...)
	go func() {
		for i := 5; i < len(want); i += 7000 {
			client.Write(want[i:min(i+7000, len(want))])
			time.Sleep(time.Millisecond)
		}
	}()
	var got []byte
	small := make([]byte, 100)
	large := make([]byte, 2*readBufSize)
	for len(got) < len(want) {
		p := small
		if len(got)%3 == 0 {
			p = large
		}
		n, err := r.Read(p)
		if err != nil {
			t.Fatalf("after %d bytes: %v", len(got), err)
		}
		got = append(got, p[:n]...)
		if r.Buffered() == 0 && r.buf != nil {
			t.Fatal("a drained idleReader still holds its buffer")
		}
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the bytes read differ from those written")
	}
	var d dto.Metric
	if err := m.BytesIn.Write(&d); err != nil {
		t.Fatal(err)
	}
	if v := d.GetCounter().GetValue(); v != float64(len(want)-5) {
		t.Fatalf("BytesIn %v, want %d (the handshake counted its own)", v, len(want)-5)
	}
	if err := server.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(small); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v", err)
	}
	if r.buf != nil {
		t.Fatal("a waiting idleReader holds its buffer")
	}
	_ = server.SetReadDeadline(time.Time{})
	client.Write([]byte("last"))
	client.CloseWrite()
	b, err := io.ReadAll(r)
	if err != nil || string(b) != "last" {
		t.Fatalf("the rest: %q %v, want \"last\" then io.EOF", b, err)
	}
}
