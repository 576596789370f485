package transporttest

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core"
)

// The identity cases: a peer is the node its certificate names, under the
// cluster CA; anything else is refused and never accepted.

// Link.OpenStream: "a certificate that does not name the peer" refuses
// (a peer's node id must match its certificate, or a stolen address
// could impersonate a node).
// Dialing "b" where "c" listens fails, and c accepts nothing; dialing c as
// "c" works (so the failure is the name, not the setup).
func testWrongNode(t *testing.T, s *suite) {
	a, c := s.open(t, "a"), s.open(t, "c")
	l := dial(t, a, peerAt("b", c.Addr().String()))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	st, err := l.OpenStream(ctx)
	if err == nil {
		st.Abort()
		t.Fatal("OpenStream to node b at an address where node c listens succeeded")
	}
	if !errors.Is(err, core.ErrPeerRefused) {
		t.Fatalf("OpenStream to the wrong node: %v, want an error wrapping ErrPeerRefused", err)
	}
	expectNoAccept(t, c, 500*time.Millisecond)
	sa, sc := pair(t, a, c, "c")
	sa.Close()
	sc.Close()
}

// ServerConfig/ClientConfig: peers verify each other against the cluster
// CA. A dialer whose certificate comes from another CA is refused (at
// OpenStream, or its stream dies at once) and never Accepted; a listener
// with such a certificate is refused by a cluster dialer.
func testForeignCA(t *testing.T, s *suite) {
	b := s.open(t, "b")
	x := s.openWith(t, "a", NewCA(t).Node(t, "a")) // claims to be a, outside the cluster
	l := dial(t, x, peerOf("b", b))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	st, err := l.OpenStream(ctx)
	if err == nil {
		// TLS 1.3: the client's handshake ends before the server checks
		// the client certificate, so the refusal arrives as the stream's
		// first read.
		defer st.Abort()
		st.SetWriteDeadline(time.Now().Add(wait))
		st.Write([]byte(hello)) //nolint:errcheck // the read says what happened
		if err := readEnd(t, st); err == io.EOF {
			t.Logf("the refused stream ended with io.EOF")
		}
	} else if !errors.Is(err, core.ErrPeerRefused) {
		t.Fatalf("OpenStream with a foreign certificate: %v, want an error wrapping ErrPeerRefused", err)
	}
	expectNoAccept(t, b, time.Second)

	a := s.open(t, "a")
	l2 := dial(t, a, peerAt("a", x.Addr().String()))
	st, err = l2.OpenStream(ctx)
	if err == nil {
		st.Abort()
		t.Fatal("OpenStream to a listener whose certificate another CA signed succeeded")
	}
	if !errors.Is(err, core.ErrPeerRefused) {
		t.Fatalf("OpenStream to a foreign listener: %v, want an error wrapping ErrPeerRefused", err)
	}
	expectNoAccept(t, x, 500*time.Millisecond)
}

// expectNoAccept fails if tr accepts a stream within d.
func expectNoAccept(t testing.TB, tr core.Transport, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	st, err := tr.Accept(ctx)
	if err == nil {
		st.Abort()
		t.Fatalf("a refused peer's stream was accepted (PeerNode %q)", st.PeerNode())
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Accept: %v, want its context to end", err)
	}
}
