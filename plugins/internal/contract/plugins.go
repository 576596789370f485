package contract

import (
	"context"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/fibrilgo/fibril/plugins/pluginpb"
)

// The go-plugin faces of the plugin sets. On the plugin side Impl is set
// and go-plugin registers it; on the host side it is nil and go-plugin
// hands out the generated client. Only gRPC is spoken.

// Coordination is the coordination kind, served under the name
// "coordination".
type Coordination struct {
	plugin.NetRPCUnsupportedPlugin
	Impl pluginpb.CoordinationServer
}

func (p *Coordination) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	pluginpb.RegisterCoordinationServer(s, p.Impl)
	return nil
}

func (p *Coordination) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return pluginpb.NewCoordinationClient(c), nil
}

// Transport is the transport kind, served under the name "transport".
type Transport struct {
	plugin.NetRPCUnsupportedPlugin
	Impl pluginpb.TransportServer
}

func (p *Transport) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	pluginpb.RegisterTransportServer(s, p.Impl)
	return nil
}

func (p *Transport) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return pluginpb.NewTransportClient(c), nil
}

// Info serves PluginInfo in every plugin set, whatever the kind, under
// InfoPluginName, so a host can describe a binary before (or without)
// using its kind.
type Info struct {
	plugin.NetRPCUnsupportedPlugin
	Impl pluginpb.PluginServer
}

func (p *Info) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	pluginpb.RegisterPluginServer(s, p.Impl)
	return nil
}

func (p *Info) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return pluginpb.NewPluginClient(c), nil
}
