package broker

import (
	"runtime/debug"
	"testing"
)

func TestVersionOf(t *testing.T) {
	rev := []debug.BuildSetting{{Key: "vcs.revision", Value: "9747a2a76836d090269e2b6a95a906cf83ebc479"}}
	dirty := append(rev, debug.BuildSetting{Key: "vcs.modified", Value: "true"})
	for _, c := range []struct {
		version  string
		settings []debug.BuildSetting
		want     string
	}{
		{"", nil, "dev"},
		{"(devel)", nil, "dev"},
		{"(devel)", rev, "dev (9747a2a76836)"},
		{"(devel)", dirty, "dev (9747a2a76836+dirty)"},
		{"v1.2.0", rev, "v1.2.0 (9747a2a76836)"},
		{"v0.0.0-20261204160615-9747a2a76836+dirty", dirty, "v0.0.0-20261204160615-9747a2a76836+dirty"},
	} {
		bi := &debug.BuildInfo{Main: debug.Module{Version: c.version}, Settings: c.settings}
		if got := versionOf(bi); got != c.want {
			t.Errorf("version %q %v: %q, want %q", c.version, c.settings, got, c.want)
		}
	}
}
