// Package buildinfo says which build of Fibril Go is running: version,
// VCS revision, build date and Go version. Release builds stamp them with
// the linker (scripts/release.sh):
//
//	go build -ldflags "-X github.com/fibrilgo/fibril/core/buildinfo.version=v1.2.0
//	  -X github.com/fibrilgo/fibril/core/buildinfo.revision=<commit>
//	  -X github.com/fibrilgo/fibril/core/buildinfo.date=<RFC 3339>"
//
// Any other build reads what the Go toolchain recorded (the module version,
// and vcs.revision, vcs.time and vcs.modified when built from a checkout),
// so a binary built with plain `go build` still names its commit rather
// than a bare "dev".
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Set by -ldflags -X in release builds; empty otherwise.
var version, revision, date string

// Info describes one build.
type Info struct {
	// Version is the release version ("v1.2.0"), the module's version
	// when built as a dependency, or "dev".
	Version string `json:"version"`
	// Revision is the VCS commit, empty when unknown; Modified says the
	// tree had uncommitted changes.
	Revision string `json:"revision,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	// Date is when the commit was made (toolchain builds) or the build
	// ran (release builds), RFC 3339; empty when unknown.
	Date      string `json:"date,omitempty"`
	GoVersion string `json:"go_version"`
}

// Get returns this binary's build information.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return from(bi, version, revision, date)
}

// from merges the linker's stamps (which win) with the toolchain's record.
func from(bi *debug.BuildInfo, version, revision, date string) Info {
	i := Info{Version: version, Revision: revision, Date: date, GoVersion: runtime.Version()}
	if bi == nil {
		if i.Version == "" {
			i.Version = "dev"
		}
		return i
	}
	if bi.GoVersion != "" {
		i.GoVersion = bi.GoVersion
	}
	if i.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		i.Version = bi.Main.Version
	}
	if i.Version == "" {
		i.Version = "dev"
	}
	stamped := revision != ""
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			if !stamped {
				i.Revision = s.Value
			}
		case "vcs.time":
			if i.Date == "" {
				i.Date = s.Value
			}
		case "vcs.modified":
			if !stamped {
				i.Modified = s.Value == "true"
			}
		}
	}
	return i
}

// ShortRevision is the revision's first 12 characters, with "+dirty" for
// a modified tree; empty when unknown.
func (i Info) ShortRevision() string {
	r := i.Revision
	if len(r) > 12 {
		r = r[:12]
	}
	if r != "" && i.Modified {
		r += "+dirty"
	}
	return r
}

// Short is the version with the revision when the version does not name
// it already (a pseudo-version does): "v1.2.0 (9747a2a76836)", "dev
// (9747a2a76836+dirty)", "dev".
func (i Info) Short() string {
	r := i.ShortRevision()
	if r == "" || strings.Contains(i.Version, strings.TrimSuffix(r, "+dirty")) {
		return i.Version
	}
	return i.Version + " (" + r + ")"
}

// String is the one line `version` subcommands print, after the program
// name: "v1.2.0 (commit 9747a2a76836, 2026-12-04T16:06:15Z, go1.26.1)".
func (i Info) String() string {
	var parts []string
	if r := i.ShortRevision(); r != "" {
		parts = append(parts, "commit "+r)
	}
	if i.Date != "" {
		parts = append(parts, i.Date)
	}
	parts = append(parts, i.GoVersion)
	return fmt.Sprintf("%s (%s)", i.Version, strings.Join(parts, ", "))
}
