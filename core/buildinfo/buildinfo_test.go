package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestFrom(t *testing.T) {
	rev := []debug.BuildSetting{{Key: "vcs.revision", Value: "9747a2a76836d090269e2b6a95a906cf83ebc479"},
		{Key: "vcs.time", Value: "2026-12-04T16:06:15Z"}}
	dirty := append(rev, debug.BuildSetting{Key: "vcs.modified", Value: "true"})
	for _, c := range []struct {
		version          string
		settings         []debug.BuildSetting
		ldVersion, ldRev string
		short, line      string
	}{
		{"", nil, "", "", "dev", "dev (go1.26)"},
		{"(devel)", nil, "", "", "dev", "dev (go1.26)"},
		{"(devel)", rev, "", "", "dev (9747a2a76836)", "dev (commit 9747a2a76836, 2026-12-04T16:06:15Z, go1.26)"},
		{"(devel)", dirty, "", "", "dev (9747a2a76836+dirty)", "dev (commit 9747a2a76836+dirty, 2026-12-04T16:06:15Z, go1.26)"},
		{"v1.2.0", rev, "", "", "v1.2.0 (9747a2a76836)", "v1.2.0 (commit 9747a2a76836, 2026-12-04T16:06:15Z, go1.26)"},
		{"v0.0.0-20261204160615-9747a2a76836+dirty", dirty, "", "", "v0.0.0-20261204160615-9747a2a76836+dirty",
			"v0.0.0-20261204160615-9747a2a76836+dirty (commit 9747a2a76836+dirty, 2026-12-04T16:06:15Z, go1.26)"},
		// A release build: the linker's stamps win over a dirty tree's record.
		{"(devel)", dirty, "v1.3.0", "abcdef0123456789", "v1.3.0 (abcdef012345)", "v1.3.0 (commit abcdef012345, 2026-12-04T16:06:15Z, go1.26)"},
	} {
		bi := &debug.BuildInfo{GoVersion: "go1.26", Main: debug.Module{Version: c.version}, Settings: c.settings}
		i := from(bi, c.ldVersion, c.ldRev, "")
		if got := i.Short(); got != c.short {
			t.Errorf("%q %v: Short %q, want %q", c.version, c.settings, got, c.short)
		}
		if got := i.String(); got != c.line {
			t.Errorf("%q %v: String %q, want %q", c.version, c.settings, got, c.line)
		}
	}
	if i := from(nil, "", "", ""); i.Version != "dev" || i.GoVersion == "" {
		t.Errorf("no build information: %+v", i)
	}
}

// A test binary is built from this checkout, so unless the build ran
// with -buildvcs=false it records the revision.
func TestGet(t *testing.T) {
	i := Get()
	if i.Version == "" || i.GoVersion == "" {
		t.Fatalf("Get() = %+v", i)
	}
	t.Logf("this test binary: %s", i)
}
