package host

import (
	"testing"

	"github.com/fibrilgo/fibril/plugins"
	"github.com/fibrilgo/fibril/plugins/pluginpb"
)

// What a plugin answers to PluginInfo reads back whole (the SDK half of
// the round trip, Info to proto, is tested in package plugins).
func TestPluginInfoFromProto(t *testing.T) {
	p := pluginInfoFromProto(&pluginpb.PluginInfoResponse{
		Name: "x", Kind: plugins.KindCoordination, Version: "2", ApiVersions: []int32{1, 3},
		Config: []*pluginpb.ConfigKey{{Name: "addr", Type: "string"}}, SdkVersion: plugins.SDKVersion,
	})
	if p.Name != "x" || p.Kind != plugins.KindCoordination || p.Version != "2" || len(p.APIVersions) != 2 || p.APIVersions[0] != 1 || p.Config[0].Name != "addr" || p.SDKVersion != plugins.SDKVersion {
		t.Fatalf("round trip: %+v", p)
	}
}
