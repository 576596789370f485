package host

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/pelletier/go-toml/v2"

	"github.com/fibrilgo/fibril/plugins"
)

// ErrChecksumMismatch is wrapped by the error that refuses to launch a
// plugin binary whose SHA-256 is not the one its catalog entry names.
var ErrChecksumMismatch = errors.New("plugin binary does not match its catalog sha256")

// Catalog is the run-time list of external plugins, read from the file
// named by plugins.catalog. A nil *Catalog is an empty one.
//
// The format (documented for operators in plugins.toml and
// plugins/README.md):
//
//	[[plugin]]
//	kind    = "coordination"                # coordination | transport
//	name    = "etcd"                        # the name config refers to
//	version = "1.2.0"                       # the plugin's release, informational
//	command = "/usr/lib/fibril/fibril-etcd" # absolute, or relative to the catalog file
//	args    = ["--quiet"]                   # optional
//	sha256  = "9f86d0…"                     # sha256sum of the command file
type Catalog struct {
	// Path is the file the catalog was read from ("" when parsed from
	// memory without a name).
	Path    string
	Plugins []CatalogEntry
}

// CatalogEntry is one [[plugin]] entry.
type CatalogEntry struct {
	Kind    string
	Name    string
	Version string
	// Command is the plugin binary, made absolute against the catalog's
	// directory when the file gave a relative path. It is never looked up
	// in PATH: the checksum must be of one definite file.
	Command string
	Args    []string
	// SHA256 is the expected digest, lower-case hex.
	SHA256 string

	catalog string // file, for messages
	index   int    // position in the file (1-based), for messages
}

// rawCatalog is the file as written; decoding is strict, so a misspelt
// field is an error rather than a silently ignored line.
type rawCatalog struct {
	Plugin []rawEntry `toml:"plugin"`
}

type rawEntry struct {
	Kind    string   `toml:"kind"`
	Name    string   `toml:"name"`
	Version string   `toml:"version"`
	Command string   `toml:"command"`
	Args    []string `toml:"args"`
	SHA256  string   `toml:"sha256"`
}

var (
	namePattern   = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]*$`)
	sha256Pattern = regexp.MustCompile(`^[0-9a-f]{64}$`)
	catalogKinds  = []string{plugins.KindCoordination, plugins.KindTransport}
	// reservedNames are values of coordination.backend / transport.backend
	// that never name a plugin.
	reservedNames = map[string][]string{plugins.KindCoordination: {"none"}}
)

// LoadCatalog reads and validates the catalog file at path. An empty path
// (plugins.catalog unset) is an empty catalog.
func LoadCatalog(path string) (*Catalog, error) {
	if path == "" {
		return &Catalog{}, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("plugin catalog: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		abs = path
	}
	return ParseCatalog(abs, data)
}

// ParseCatalog parses and validates catalog data; path names the file in
// errors and anchors relative commands. Every problem is reported, not only
// the first, so an operator fixes the file in one go.
func ParseCatalog(path string, data []byte) (*Catalog, error) {
	var raw rawCatalog
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return nil, catalogDecodeError(path, err)
	}
	c := &Catalog{Path: path}
	var errs []error
	seen := map[string]int{}
	for i, r := range raw.Plugin {
		e := CatalogEntry{
			Kind: r.Kind, Name: r.Name, Version: r.Version, Command: r.Command,
			Args: r.Args, SHA256: strings.ToLower(strings.TrimSpace(r.SHA256)),
			catalog: path, index: i + 1,
		}
		fail := func(field, format string, a ...any) {
			errs = append(errs, fmt.Errorf("%s: field %s: %s", e.where(), field, fmt.Sprintf(format, a...)))
		}
		switch {
		case e.Kind == "":
			fail("kind", "missing (one of %s)", strings.Join(catalogKinds, ", "))
		case !slices.Contains(catalogKinds, e.Kind):
			fail("kind", "%q is not one of %s", e.Kind, strings.Join(catalogKinds, ", "))
		}
		switch {
		case e.Name == "":
			fail("name", "missing")
		case !namePattern.MatchString(e.Name):
			fail("name", "%q must be lower-case letters, digits, '.', '_' or '-', starting with a letter or digit", e.Name)
		case slices.Contains(reservedNames[e.Kind], e.Name):
			fail("name", "%q is reserved", e.Name)
		}
		if prev, dup := seen[e.Kind+"\x00"+e.Name]; dup && e.Name != "" {
			fail("name", "%s plugin %q is already defined by entry %d", e.Kind, e.Name, prev)
		} else {
			seen[e.Kind+"\x00"+e.Name] = e.index
		}
		if strings.TrimSpace(e.Version) == "" {
			fail("version", "missing (the plugin's release version, as `fibrilctl plugins describe` prints it)")
		}
		if e.Command == "" {
			fail("command", "missing (path of the plugin binary)")
		} else if !filepath.IsAbs(e.Command) {
			e.Command = filepath.Join(filepath.Dir(path), e.Command)
		}
		switch {
		case e.SHA256 == "":
			fail("sha256", "missing (run: sha256sum %s)", e.Command)
		case !sha256Pattern.MatchString(e.SHA256):
			fail("sha256", "want 64 hex digits, got %q", r.SHA256)
		}
		c.Plugins = append(c.Plugins, e)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}

// catalogDecodeError names the file and the line of a TOML error.
func catalogDecodeError(path string, err error) error {
	var strict *toml.StrictMissingError
	if errors.As(err, &strict) {
		var errs []error
		for _, e := range strict.Errors {
			row, _ := e.Position()
			errs = append(errs, fmt.Errorf("plugin catalog %s: line %d: unknown field %q (fields: kind, name, version, command, args, sha256 under [[plugin]])",
				path, row, strings.Join(e.Key(), ".")))
		}
		return errors.Join(errs...)
	}
	var de *toml.DecodeError
	if errors.As(err, &de) {
		row, col := de.Position()
		return fmt.Errorf("plugin catalog %s: line %d column %d: %v", path, row, col, err)
	}
	return fmt.Errorf("plugin catalog %s: %w", path, err)
}

// where names the entry in messages: file, position and name.
func (e *CatalogEntry) where() string {
	s := fmt.Sprintf("plugin catalog %s: entry %d", e.catalog, e.index)
	if e.Name != "" {
		s += fmt.Sprintf(" (%s %q)", e.Kind, e.Name)
	}
	return s
}

// Lookup finds the entry of kind and name.
func (c *Catalog) Lookup(kind, name string) (*CatalogEntry, bool) {
	if c == nil {
		return nil, false
	}
	for i := range c.Plugins {
		if c.Plugins[i].Kind == kind && c.Plugins[i].Name == name {
			return &c.Plugins[i], true
		}
	}
	return nil, false
}

// Names lists the names of kind's entries, sorted.
func (c *Catalog) Names(kind string) []string {
	var out []string
	if c != nil {
		for _, e := range c.Plugins {
			if e.Kind == kind {
				out = append(out, e.Name)
			}
		}
	}
	sort.Strings(out)
	return out
}

// FileSHA256 hashes the command file (lower-case hex).
func (e *CatalogEntry) FileSHA256() (string, error) {
	return FileSHA256(e.Command)
}

// FileSHA256 hashes the file at path (lower-case hex), as sha256sum does:
// the digest a catalog entry's sha256 field must hold.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Verify hashes the command file and refuses it unless the digest is the
// catalog's. The host calls it before every launch, restarts included, so
// a binary replaced under a running broker is never started.
func (e *CatalogEntry) Verify() error {
	got, err := e.FileSHA256()
	if err != nil {
		return fmt.Errorf("%s: cannot verify %s: %w", e.where(), e.Command, err)
	}
	if got != e.SHA256 {
		return fmt.Errorf("%s: %w: %s has sha256 %s, the catalog expects %s; refusing to launch it (if the new binary is trusted, put its sha256 in the catalog)",
			e.where(), ErrChecksumMismatch, e.Command, got, e.SHA256)
	}
	return nil
}
