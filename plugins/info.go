package plugins

import (
	"fmt"
	"slices"
	"strings"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/plugins/pluginpb"
)

// SDKVersion is the version of this plugin SDK, reported by PluginInfo so
// that an operator can tell which SDK a third-party binary was built with.
const SDKVersion = "0.1.0"

// apiVersions are the API versions of each kind this build implements, on
// both sides: the host offers them, and the SDK serves them. go-plugin
// picks the highest version both sides list (VersionedPlugins).
var apiVersions = map[string][]int{
	KindCoordination: {core.CoordinationAPIVersion},
	KindTransport:    {core.TransportAPIVersion},
}

// APIVersions returns the API versions of kind this build supports, in
// increasing order (nil for an unknown kind).
func APIVersions(kind string) []int {
	return slices.Clone(apiVersions[kind])
}

// Info is what a plugin author says about a plugin binary. ServeCoordination
// and ServeTransport answer PluginInfo with it, and `fibrilctl plugins
// describe` prints it.
type Info struct {
	// Name is the plugin's own name (e.g. "etcd"). The operator may list
	// it under another name in the catalog; the catalog name is the one
	// configuration refers to.
	Name string
	// Version is the plugin's release version, free form ("1.4.2").
	// Operators copy it into the catalog entry, and the host warns when
	// the two disagree.
	Version string
	// APIVersions lists the kind's API versions the binary serves. Leave
	// it empty: it then lists every version this SDK implements, which is
	// the truth. Setting it only makes sense in tests of the negotiation.
	APIVersions []int
	// Config documents the keys the plugin reads from
	// CoordinationEnv.Config or TransportEnv.Config, without the
	// "coordination.<name>." or "transport.<name>." prefix.
	Config []ConfigKey
}

// ConfigKey documents one configuration key of a plugin.
type ConfigKey struct {
	Name string `json:"name"`
	// Type is one of string, int, bool, duration, list.
	Type     string `json:"type"`
	Default  string `json:"default"`
	Doc      string `json:"doc"`
	Required bool   `json:"required"`
}

var configTypes = []string{"string", "int", "bool", "duration", "list"}

// validate checks what an author filled in, so a malformed Info fails when
// the binary starts rather than confusing an operator later.
func (i Info) validate(kind string) error {
	if strings.TrimSpace(i.Name) == "" {
		return fmt.Errorf("plugins: Info.Name is empty")
	}
	if strings.TrimSpace(i.Version) == "" {
		return fmt.Errorf("plugins: Info.Version is empty")
	}
	for _, v := range i.APIVersions {
		if v <= 0 {
			return fmt.Errorf("plugins: Info.APIVersions: %d is not a positive version", v)
		}
	}
	seen := map[string]bool{}
	for _, k := range i.Config {
		if k.Name == "" {
			return fmt.Errorf("plugins: Info.Config: a key has no name")
		}
		if seen[k.Name] {
			return fmt.Errorf("plugins: Info.Config: key %q listed twice", k.Name)
		}
		seen[k.Name] = true
		if !slices.Contains(configTypes, k.Type) {
			return fmt.Errorf("plugins: Info.Config: key %q: type %q is not one of %s", k.Name, k.Type, strings.Join(configTypes, ", "))
		}
	}
	if len(apiVersions[kind]) == 0 {
		return fmt.Errorf("plugins: kind %q is not served by this SDK", kind)
	}
	return nil
}

// servedVersions is what the binary offers: Info.APIVersions or, when
// empty, every version of kind this SDK implements.
func (i Info) servedVersions(kind string) []int {
	if len(i.APIVersions) > 0 {
		v := slices.Clone(i.APIVersions)
		slices.Sort(v)
		return slices.Compact(v)
	}
	return APIVersions(kind)
}

func (i Info) toProto(kind string) *pluginpb.PluginInfoResponse {
	out := &pluginpb.PluginInfoResponse{Name: i.Name, Kind: kind, Version: i.Version, SdkVersion: SDKVersion}
	for _, v := range i.servedVersions(kind) {
		out.ApiVersions = append(out.ApiVersions, int32(v))
	}
	for _, k := range i.Config {
		out.Config = append(out.Config, &pluginpb.ConfigKey{Name: k.Name, Type: k.Type, Default: k.Default, Doc: k.Doc, Required: k.Required})
	}
	return out
}
