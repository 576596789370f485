package config

import (
	"errors"
	"flag"
	"reflect"

	"github.com/knadh/koanf/providers/confmap"
	"github.com/knadh/koanf/v2"
)

// ErrHelp is returned by Load when the arguments ask for help (-h, --help).
var ErrHelp = flag.ErrHelp

// Loaded describes how a Config was put together.
type Loaded struct {
	// ConfigFile is the file that was read, "" when none.
	ConfigFile string
	// Sources maps every bootstrap and runtime-seed key to the origin of
	// its effective value.
	Sources map[string]Origin
	// Warnings are problems that do not stop startup (unknown FIBRIL_*
	// variables, ignored legacy variables, settings that have no effect).
	// The caller logs them.
	Warnings []Warning
}

// Source returns the origin of a key's effective value.
func (l *Loaded) Source(key string) Origin {
	if o, ok := l.Sources[key]; ok {
		return o
	}
	return defaultOrigin
}

// Load builds the configuration from built-in defaults, the TOML file
// named by --config or FIBRIL_CONFIG, FIBRIL_* variables from environ and
// the flags in args, in that order of precedence (S-166).
//
// It reads nothing but its arguments and the named file: no os.Getenv, so
// tests are hermetic. On failure the error joins every problem found (see
// Problems) and the Config is nil; the Loaded is returned either way so its
// warnings can be logged. When args ask for help the error is ErrHelp.
func Load(args, environ []string) (*Config, *Loaded, error) {
	ld := &Loaded{Sources: map[string]Origin{}}

	fl := parseFlags(args)
	if fl.help {
		return nil, ld, ErrHelp
	}
	env := parseEnv(environ)
	ld.Warnings = append(ld.Warnings, env.warnings...)
	var errs []error

	// The file comes first in precedence but is found last: its path may
	// be a flag or a variable.
	var file []setting
	fileParsed := true
	path, via := env.configPath, Origin{Layer: LayerEnv, Name: EnvConfig}
	if fl.configSet {
		path, via = fl.configPath, Origin{Layer: LayerFlag, Name: FlagConfig}
	}
	if path != "" {
		var ferrs []error
		file, ferrs, fileParsed = loadFile(path, via)
		errs = append(errs, ferrs...)
		ld.ConfigFile = path
	}
	errs = append(errs, env.errs...)
	errs = append(errs, fl.errs...)

	vals, err := merge(ld, defaultSettings(), file, env.settings, fl.settings)
	if err != nil {
		errs = append(errs, err)
	}
	resolveFollowers(vals, ld)

	// Without its file layer the merged values are not what the operator
	// wrote, so cross-key verdicts would only mislead.
	if fileParsed {
		cross, warns := crossCheck(vals, ld)
		errs = append(errs, cross...)
		ld.Warnings = append(ld.Warnings, warns...)
	}
	if len(errs) > 0 {
		return nil, ld, errors.Join(errs...)
	}

	cfg := &Config{}
	rv := reflect.ValueOf(cfg).Elem()
	for name, v := range vals {
		setField(rv, configFields[name], v)
	}
	return cfg, ld, nil
}

// defaultSettings is the bottom layer: every bootstrap and seed key with
// its built-in value. Unset optional booleans are left out so that
// resolveFollowers can tell "unset" from "false".
func defaultSettings() []setting {
	var out []setting
	for i := range keys {
		k := &keys[i]
		if k.Class == RuntimeOnly || k.Default == nil {
			continue
		}
		out = append(out, setting{key: k, value: k.Default, origin: defaultOrigin})
	}
	return out
}

// merge layers the settings with koanf, later layers overriding earlier
// ones key by key, and records which layer won each key. It returns the
// effective value of every key that has one.
func merge(ld *Loaded, layers ...[]setting) (map[string]any, error) {
	k := koanf.New(".")
	for _, layer := range layers {
		m := make(map[string]any, len(layer))
		for _, s := range layer {
			m[s.key.Name] = s.value
			ld.Sources[s.key.Name] = s.origin
		}
		if err := k.Load(confmap.Provider(m, "."), nil); err != nil {
			return nil, err
		}
	}
	vals := map[string]any{}
	for name := range ld.Sources {
		vals[name] = k.Get(name)
	}
	return vals, nil
}

// resolveFollowers gives each unset optional boolean the effective value
// of the key it follows, and records that in its origin.
func resolveFollowers(vals map[string]any, ld *Loaded) {
	for i := range keys {
		k := &keys[i]
		if k.Kind != KindOptBool {
			continue
		}
		if _, set := vals[k.Name]; set {
			continue
		}
		vals[k.Name] = vals[k.Follows]
		ld.Sources[k.Name] = Origin{Layer: LayerDefault, Follows: k.Follows}
	}
}
