package auth

import (
	"net"
	"net/netip"
	"testing"
)

func TestIsLoopback(t *testing.T) {
	cases := map[string]bool{
		"127.0.0.1": true, "127.255.255.254": true, "::1": true, "::1%lo": true,
		"::ffff:127.0.0.1": true, "::ffff:127.1.2.3": true,
		"128.0.0.1": false, "10.0.0.1": false, "0.0.0.0": false, "::": false,
		"::ffff:10.0.0.1": false, "2001:db8::1": false, "fe80::1%eth0": false,
		"::2": false, "::127.0.0.1": false, // IPv4-compatible (deprecated) is not mapped
	}
	for s, want := range cases {
		if got := IsLoopback(netip.MustParseAddr(s)); got != want {
			t.Errorf("IsLoopback(%s) = %v, want %v", s, got, want)
		}
	}
	if IsLoopback(netip.Addr{}) {
		t.Error("zero address is loopback")
	}
}

func TestPeerAddr(t *testing.T) {
	tcp := &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 5}
	if got := PeerAddr(tcp); !IsLoopback(got) {
		t.Errorf("PeerAddr(%v) = %v", tcp, got)
	}
	mapped := &net.TCPAddr{IP: net.ParseIP("::ffff:127.0.0.1"), Port: 5}
	if got := PeerAddr(mapped); !IsLoopback(got) {
		t.Errorf("PeerAddr(%v) = %v", mapped, got)
	}
	remote := &net.TCPAddr{IP: net.ParseIP("192.0.2.1"), Port: 5}
	if got := PeerAddr(remote); got != netip.MustParseAddr("192.0.2.1") {
		t.Errorf("PeerAddr(%v) = %v", remote, got)
	}
	p1, p2 := net.Pipe()
	defer p1.Close()
	defer p2.Close()
	if got := PeerAddr(p1.RemoteAddr()); got.IsValid() {
		t.Errorf("PeerAddr(pipe) = %v, want invalid", got)
	}
	if got := PeerAddr(&net.UnixAddr{Name: "/tmp/x", Net: "unix"}); got.IsValid() {
		t.Errorf("PeerAddr(unix) = %v, want invalid", got)
	}
	if got := PeerAddr(nil); got.IsValid() {
		t.Errorf("PeerAddr(nil) = %v", got)
	}
}

func TestLoopbackOnly(t *testing.T) {
	cases := map[string]bool{
		"127.0.0.1:9876": true, "[::1]:9876": true, "localhost:9876": true, "LOCALHOST:1": true,
		"127.0.0.2:9876": true, "[::ffff:127.0.0.1]:9876": true,
		":9876": false, "0.0.0.0:9876": false, "[::]:9876": false, "10.0.0.5:9876": false,
		"broker.example.com:9876": false, "127.0.0.1": false, "": false,
	}
	for s, want := range cases {
		if got := LoopbackOnly(s); got != want {
			t.Errorf("LoopbackOnly(%q) = %v, want %v", s, got, want)
		}
	}
}
