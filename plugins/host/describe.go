package host

import (
	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"time"

	"github.com/hashicorp/go-plugin"

	"github.com/fibrilgo/fibril/plugins"
	"github.com/fibrilgo/fibril/plugins/internal/contract"
	"github.com/fibrilgo/fibril/plugins/pluginpb"
)

// describeVersions is how many API versions Describe offers. A describe
// must work with any plugin, including one whose API version this build
// does not speak (to say so), and go-plugin only connects when the host
// lists the version the plugin picks: so every version up to this bound is
// offered, with only the Plugin service behind it.
const describeVersions = 255

// Describe launches the plugin binary at path with args, asks PluginInfo,
// and stops it. It verifies no checksum: there is no catalog entry to
// compare with; the caller may print the file's digest for one. Whether
// the broker can use the plugin is a matter of the kind's API versions
// (compare with APIVersions).
func Describe(ctx context.Context, path string, args []string, log *slog.Logger) (PluginInfo, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	versions := map[int]plugin.PluginSet{}
	for v := 1; v <= describeVersions; v++ {
		versions[v] = plugin.PluginSet{contract.InfoPluginName: &contract.Info{}}
	}
	cmd := exec.Command(path, args...)
	cmd.Env = []string{contract.EnvLogLevel + "=" + contract.LevelName(lowestLevel(log))}
	start := 30 * time.Second
	if d, ok := ctx.Deadline(); ok {
		start = max(time.Until(d), time.Millisecond)
	}
	pc := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  contract.Handshake,
		VersionedPlugins: versions,
		Cmd:              cmd,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		StartTimeout:     start,
		Logger:           plugins.HCLog(log, ""),
	})
	defer pc.Kill()
	rpc, err := pc.Client()
	if err != nil {
		return PluginInfo{}, fmt.Errorf("start %s: %w (is it a Fibril plugin binary?)", path, err)
	}
	raw, err := rpc.Dispense(contract.InfoPluginName)
	if err != nil {
		return PluginInfo{}, fmt.Errorf("%s: %w", path, err)
	}
	resp, err := raw.(pluginpb.PluginClient).PluginInfo(ctx, &pluginpb.PluginInfoRequest{})
	if err != nil {
		return PluginInfo{}, fmt.Errorf("%s: PluginInfo: %w", path, err)
	}
	return pluginInfoFromProto(resp), nil
}

// PluginInfo is what a running plugin says about itself (the PluginInfo
// RPC).
type PluginInfo struct {
	Name        string
	Kind        string
	Version     string
	APIVersions []int
	Config      []plugins.ConfigKey
	SDKVersion  string
}

// String is one line for logs: name kind version api versions.
func (p PluginInfo) String() string {
	return fmt.Sprintf("%s (%s plugin, version %s, API versions %v, SDK %s)", p.Name, p.Kind, p.Version, p.APIVersions, p.SDKVersion)
}

// pluginInfoFromProto is the PluginInfo a plugin answered.
func pluginInfoFromProto(p *pluginpb.PluginInfoResponse) PluginInfo {
	out := PluginInfo{Name: p.GetName(), Kind: p.GetKind(), Version: p.GetVersion(), SDKVersion: p.GetSdkVersion()}
	for _, v := range p.GetApiVersions() {
		out.APIVersions = append(out.APIVersions, int(v))
	}
	for _, k := range p.GetConfig() {
		out.Config = append(out.Config, plugins.ConfigKey{Name: k.GetName(), Type: k.GetType(), Default: k.GetDefault(), Doc: k.GetDoc(), Required: k.GetRequired()})
	}
	return out
}
