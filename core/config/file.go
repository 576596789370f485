package config

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/knadh/koanf/parsers/toml/v2"
	"github.com/knadh/koanf/providers/rawbytes"
	"github.com/knadh/koanf/v2"
	gotoml "github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
)

// setting is one value a layer provides for one key.
type setting struct {
	key    *Key
	value  any
	origin Origin
}

// loadFile reads the TOML file into settings. Values are decoded by koanf's
// TOML parser; the line of each key comes from a second pass over the same
// bytes with go-toml's position-aware parser (scanLines), because decoded
// maps carry no positions. parsed is false when the file could not be read
// or parsed at all.
func loadFile(path string, via Origin) (settings []setting, errs []error, parsed bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, []error{keyError("config file", via, "%v", err)}, false
	}
	fileOrigin := Origin{Layer: LayerFile, Name: path}

	k := koanf.New(".")
	if err := k.Load(rawbytes.Provider(data), toml.Parser()); err != nil {
		o := fileOrigin
		var de *gotoml.DecodeError
		if errors.As(err, &de) {
			o.Line, _ = de.Position()
		} else if _, serr := scanLines(data); serr != nil {
			// go-toml reports redefinitions without a position;
			// scanLines finds the line itself.
			var le *lineError
			if errors.As(serr, &le) {
				o.Line = le.line
			}
		}
		return nil, []error{keyError("config file", o, "TOML syntax error: %s", strings.TrimPrefix(err.Error(), "toml: "))}, false
	}
	lines, _ := scanLines(data) // syntax errors were reported above
	lineOf := func(path string) int { return lines[path] }
	at := func(path string) Origin {
		o := fileOrigin
		o.Line = lineOf(path)
		return o
	}

	flat := k.All()
	reported := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(flat)) {
		v := flat[name]
		key := keyByName[name]
		if key == nil {
			if e := unknownFileKey(name, v, at(name)); e != nil && !reported[e.Keys[0]] {
				reported[e.Keys[0]] = true
				errs = append(errs, e)
			}
			continue
		}
		o := at(name)
		if !key.Allows(LayerFile) {
			errs = append(errs, keyError(name, o, "cannot be set in the config file: %s", key.refusal(LayerFile)))
			continue
		}
		if key.Kind == KindUsers {
			users, uerrs := usersFromTOML(key, v, o, lineOf)
			errs = append(errs, uerrs...)
			if len(uerrs) == 0 {
				settings = append(settings, setting{key, users, o})
			}
			continue
		}
		val, err := fromTOML(key, v)
		if err == nil {
			err = key.validate(val)
		}
		if err != nil {
			errs = append(errs, keyError(name, o, "%v", err))
			continue
		}
		settings = append(settings, setting{key, val, o})
	}
	return settings, sortByLine(errs), true
}

// unknownFileKey explains a flattened file key that is not in the table.
// koanf flattens tables, so a key below a known leaf means the leaf was
// written as a table, and an empty table shows up as its own path.
func unknownFileKey(name string, v any, o Origin) *Error {
	if m, ok := v.(map[string]any); ok && len(m) == 0 && isSection(name) {
		return nil // an empty [section] is harmless
	}
	for i := len(name) - 1; i > 0; i-- {
		if name[i] != '.' {
			continue
		}
		if k := keyByName[name[:i]]; k != nil {
			if k.Kind == KindUsers {
				return keyError(k.Name, o, "expected %s, got a table (write [[%s]] with double brackets)", expectation(k), k.Name)
			}
			return keyError(k.Name, o, "expected %s, got a table", expectation(k))
		}
	}
	if isSection(name) {
		return keyError(name, o, "is a section, not a value; set one of its keys, such as %s", firstKeyIn(name))
	}
	return keyError(name, o, "unknown key%s", suggestKey(name))
}

// isSection reports whether name is a table path of some key.
func isSection(name string) bool { return firstKeyIn(name) != "" }

// firstKeyIn returns the first key below the section name, or "".
func firstKeyIn(name string) string {
	for i := range keys {
		if strings.HasPrefix(keys[i].Name, name+".") {
			return keys[i].Name
		}
	}
	return ""
}

// sortByLine orders file errors by line so they read top to bottom.
func sortByLine(errs []error) []error {
	slices.SortStableFunc(errs, func(a, b error) int {
		return lineOfErr(a) - lineOfErr(b)
	})
	return errs
}

func lineOfErr(err error) int {
	if e, ok := err.(*Error); ok && len(e.Origins) > 0 {
		return e.Origins[0].Line
	}
	return 0
}

// scanLines maps every key path written in a TOML document to the line it
// is written on, using go-toml's unstable AST parser, which records the
// byte range of every key. Paths are dotted like koanf's flattened keys;
// entries of arrays get an index, as in "auth.seed_users[1].username".
// For arrays of tables the bare path maps to the first header's line.
func scanLines(data []byte) (map[string]int, error) {
	lines := map[string]int{}
	p := &unstable.Parser{}
	p.Reset(data)

	line := func(n *unstable.Node) int {
		if n == nil || n.Raw.Length == 0 {
			return 0
		}
		return p.Shape(n.Raw).Start.Line
	}
	record := func(path string, l int) {
		if _, seen := lines[path]; !seen && l > 0 {
			lines[path] = l
		}
	}
	// arrays counts the [[…]] headers seen per path, so a later header
	// below an array of tables resolves to its last entry.
	arrays := map[string]int{}
	resolve := func(parts []string) string {
		path := ""
		for i, part := range parts {
			if i > 0 {
				path += "."
			}
			path += part
			if n := arrays[path]; n > 0 && i < len(parts)-1 {
				path += "[" + strconv.Itoa(n-1) + "]"
			}
		}
		return path
	}
	join := func(prefix, path string) string {
		if prefix == "" {
			return path
		}
		return prefix + "." + path
	}

	var value func(n *unstable.Node, path string, at int)
	value = func(n *unstable.Node, path string, at int) {
		switch n.Kind {
		case unstable.InlineTable:
			it := n.Children()
			for it.Next() {
				kv := it.Node()
				parts, first := keyParts(kv)
				l := line(first)
				full := join(path, strings.Join(parts, "."))
				record(full, l)
				value(kv.Value(), full, l)
			}
		case unstable.Array:
			it := n.Children()
			for i := 0; it.Next(); i++ {
				el := it.Node()
				l := line(el)
				if l == 0 {
					l = at
				}
				elPath := fmt.Sprintf("%s[%d]", path, i)
				record(elPath, l)
				value(el, elPath, l)
			}
		}
	}

	// defined catches a key or [table] written twice, which go-toml
	// rejects without saying where.
	defined := map[string]bool{}
	define := func(path string, l int) error {
		if defined[path] {
			return &lineError{line: l, msg: path + " is defined twice"}
		}
		defined[path] = true
		return nil
	}

	table := ""
	for p.NextExpression() {
		n := p.Expression()
		switch n.Kind {
		case unstable.Table, unstable.ArrayTable:
			parts, first := keyParts(n)
			path := resolve(parts)
			l := line(first)
			record(path, l)
			table = path
			if n.Kind == unstable.Table {
				if err := define("["+path+"]", l); err != nil {
					return lines, err
				}
			}
			if n.Kind == unstable.ArrayTable {
				table = fmt.Sprintf("%s[%d]", path, arrays[path])
				arrays[path]++
				record(table, l)
			}
		case unstable.KeyValue:
			parts, first := keyParts(n)
			l := line(first)
			full := join(table, strings.Join(parts, "."))
			if err := define(full, l); err != nil {
				return lines, err
			}
			record(full, l)
			value(n.Value(), full, l)
		}
	}
	return lines, p.Error()
}

// lineError is a structural TOML error found by scanLines.
type lineError struct {
	line int
	msg  string
}

func (e *lineError) Error() string { return fmt.Sprintf("line %d: %s", e.line, e.msg) }

// keyParts returns the parts of a node's (possibly dotted) key and its
// first key node, whose position is the line of the expression.
func keyParts(n *unstable.Node) ([]string, *unstable.Node) {
	var parts []string
	var first *unstable.Node
	it := n.Key()
	for it.Next() {
		if first == nil {
			first = it.Node()
		}
		parts = append(parts, string(it.Node().Data))
	}
	return parts, first
}
