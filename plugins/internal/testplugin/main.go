// Command testplugin is the coordination plugin the plugins/host tests
// run as a real go-plugin process (and the example of a plugin main).
//
// Without configuration it serves an in-memory store of its own (state
// dies with the process). With coordination config "socket" set, it is a
// proxy to a CoordinationServer on that unix socket (plugintest.Serve in
// the test process): the state then outlives the plugin process, several
// plugin processes share it, and leases can be re-attached after a crash —
// which is what the restart tests need.
//
// Flags exist for negotiation tests: --api-versions advertises other API
// versions than the SDK's.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/memcoord"
	"github.com/fibrilgo/fibril/plugins"
	"github.com/fibrilgo/fibril/plugins/host"
)

func main() {
	name := flag.String("name", "testplugin", "plugin name reported by PluginInfo")
	version := flag.String("version", "0.0.1-test", "plugin version reported by PluginInfo")
	apiVersions := flag.String("api-versions", "", "comma-separated API versions to advertise (default: the SDK's)")
	flag.Parse()
	info := plugins.Info{
		Name:    *name,
		Version: *version,
		Config: []plugins.ConfigKey{
			{Name: "socket", Type: "string", Doc: "unix socket of a CoordinationServer to proxy to; empty: an in-memory store of this process"},
			{Name: "min_ttl_ms", Type: "int", Default: "50", Doc: "MinTTL of the in-memory store"},
		},
	}
	for _, s := range strings.Split(*apiVersions, ",") {
		if s = strings.TrimSpace(s); s != "" {
			v, err := strconv.Atoi(s)
			if err != nil {
				fmt.Fprintln(os.Stderr, "--api-versions:", err)
				os.Exit(2)
			}
			info.APIVersions = append(info.APIVersions, v)
		}
	}
	plugins.ServeCoordination(open, info)
}

// open is the backend factory the SDK calls on Configure.
func open(ctx context.Context, env plugins.CoordinationEnv) (core.Coordinator, error) {
	if sock := env.Config["socket"]; sock != "" {
		conn, err := grpc.DialContext(ctx, "unix:"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		c, err := host.ConnectCoordination(ctx, conn, env)
		if err != nil {
			conn.Close()
			return nil, err
		}
		env.Logger.Info("proxying to a shared store", "socket", sock)
		return &proxy{Coordinator: c, conn: conn}, nil
	}
	opts := memcoord.Options{}
	if s := env.Config["min_ttl_ms"]; s != "" {
		ms, err := strconv.Atoi(s)
		if err != nil {
			return nil, core.Errorf(core.ErrBadRequest, "min_ttl_ms: %v", err)
		}
		opts.MinTTL = time.Duration(ms) * time.Millisecond
	}
	return memcoord.NewStore(opts).Member(string(env.NodeID)), nil
}

// proxy closes its connection with the Coordinator and keeps the
// core.LeaseAttacher ability of the protocol client visible.
type proxy struct {
	core.Coordinator
	conn *grpc.ClientConn
}

func (p *proxy) AttachLease(ctx context.Context, id string) (core.Lease, error) {
	return p.Coordinator.(core.LeaseAttacher).AttachLease(ctx, id)
}

func (p *proxy) Close() error {
	err := p.Coordinator.Close()
	p.conn.Close()
	return err
}
