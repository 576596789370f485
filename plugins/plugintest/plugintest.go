// Package plugintest helps plugin authors test a coordination backend or
// a transport through the plugin protocol, in one process and without
// building a binary. The conformance suites the built-ins pass run the
// same way over the boundary:
//
//	func TestConformance(t *testing.T) {
//		plugintest.CoordinationConformance(t, info, func(t *testing.T, n int) []plugins.CoordinationFactory {
//			// n factories: the members of one fresh cluster
//		})
//	}
//
//	func TestTransportConformance(t *testing.T) {
//		plugintest.TransportConformance(t, mytransport.Open, info, "tcp", false)
//	}
//
// Coordination, Transport, Serve and Dial give finer control.
//
// Every call then crosses gRPC exactly as it does between the broker and a
// plugin process (encoding, error mapping, lease and election streams),
// and every transport stream's bytes cross the plugin's unix data socket
// in frames, so what passes here fails in production only for
// process-level reasons (start, handshake, restarts), which the tests of
// plugins/host and `fibrilctl plugins describe` cover. The broker's side
// of each call is plugins/host's client, so this kit imports the host; the
// SDK itself does not.
package plugintest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/coordtest"
	"github.com/fibrilgo/fibril/plugins"
	"github.com/fibrilgo/fibril/plugins/host"
	"github.com/fibrilgo/fibril/transport/transporttest"
)

// Env is a CoordinationEnv for a test node: its own data directory (removed
// with the test), a fixed cluster secret, and an empty Config.
func Env(t testing.TB, nodeID string) plugins.CoordinationEnv {
	t.Helper()
	dir := filepath.Join(t.TempDir(), nodeID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return plugins.CoordinationEnv{
		NodeID:        core.NodeID(nodeID),
		DataDir:       dir,
		Config:        map[string]string{},
		ClusterSecret: "plugintest-secret",
	}
}

// SocketDir returns a fresh directory for unix sockets, removed with the
// test. It is short on purpose: t.TempDir paths can exceed the ~100 byte
// limit of a socket path.
func SocketDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "fpt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// Serve runs a CoordinationServer for factory on a new unix socket in dir
// and returns the socket path. The server (and the backend, if opened)
// stops with the test. Any process may connect to it, which is how a test
// gives several plugin processes one shared backend.
func Serve(t testing.TB, dir string, factory plugins.CoordinationFactory, info plugins.Info) string {
	t.Helper()
	srv := plugins.NewCoordinationServer(factory, info, nil)
	return serveGRPC(t, dir, "c", srv.Register, srv.CloseBackend)
}

// serveGRPC serves a plugin server (register) on a new unix socket in dir
// and returns its path; the gRPC server stops with the test, then the
// backend closes.
func serveGRPC(t testing.TB, dir, prefix string, register func(*grpc.Server), closeBackend func() error) string {
	t.Helper()
	f, err := os.CreateTemp(dir, prefix+"*.sock")
	if err != nil {
		t.Fatal(err)
	}
	path := f.Name()
	f.Close()
	os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	register(g)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = g.Serve(ln)
	}()
	t.Cleanup(func() {
		g.Stop()
		<-done
		_ = closeBackend()
	})
	return path
}

// dialGRPC connects to the plugin server at the unix socket path; the
// connection closes with the test.
func dialGRPC(t testing.TB, path string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.Dial("unix:"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// Dial connects to the CoordinationServer at the unix socket path and
// returns the Coordinator speaking to it, Configured with env. Closing it
// closes the backend; the connection closes with the test.
func Dial(t testing.TB, path string, env plugins.CoordinationEnv) core.Coordinator {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := host.ConnectCoordination(ctx, dialGRPC(t, path), env)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Coordination serves factory in-process and returns the Coordinator that
// reaches it through the plugin protocol, as a broker would reach the
// plugin. Everything stops with the test.
func Coordination(t testing.TB, factory plugins.CoordinationFactory, info plugins.Info, env plugins.CoordinationEnv) core.Coordinator {
	t.Helper()
	return Dial(t, Serve(t, SocketDir(t), factory, info), env)
}

// Transport serves factory in-process, as a plugin process would (the
// transport protocol over gRPC on a unix socket, each stream's bytes over
// the server's data socket), and returns the Transport that reaches it
// through the protocol, Configured with env, as a broker would reach the
// plugin. It fails the test when the factory fails. Closing the result
// closes the transport; everything stops with the test.
func Transport(t testing.TB, factory plugins.TransportFactory, info plugins.Info, env plugins.TransportEnv) core.Transport {
	t.Helper()
	srv := plugins.NewTransportServer(factory, info, env.Logger)
	path := serveGRPC(t, SocketDir(t), "t", srv.Register, srv.CloseBackend)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := host.ConnectTransport(ctx, dialGRPC(t, path), env)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

// CoordinationConformance runs the coordination conformance suite
// (core/coordtest) through the plugin protocol. For each cluster the
// suite asks for, members returns the factories of its n members; each is
// served in-process and reached as a broker would reach it, with the
// environment of Env(t, "node-<i>") (i from 1).
func CoordinationConformance(t *testing.T, info plugins.Info, members func(t *testing.T, n int) []plugins.CoordinationFactory) {
	t.Helper()
	coordtest.Run(t, func(t *testing.T, n int) *coordtest.Cluster {
		cl := &coordtest.Cluster{}
		for i, f := range members(t, n) {
			cl.Members = append(cl.Members, Coordination(t, f, info, Env(t, fmt.Sprintf("node-%d", i+1))))
		}
		return cl
	})
}

// TransportConformance runs the transport conformance suite
// (transport/transporttest) against factory through the plugin protocol.
// network is the transport's wire ("tcp" or "udp"); plaintext also runs
// the suite without peer TLS, for a transport that allows it.
func TransportConformance(t *testing.T, factory plugins.TransportFactory, info plugins.Info, network string, plaintext bool) {
	t.Helper()
	transporttest.Run(t, transporttest.Config{
		Network:   network,
		Plaintext: plaintext,
		Open: func(t testing.TB, env plugins.TransportEnv) core.Transport {
			return Transport(t, factory, info, env)
		},
	})
}
