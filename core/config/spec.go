package config

import (
	"fmt"
	"slices"
	"strings"
)

// Kind is the type of a key's value.
type Kind int

// The value kinds a key can have.
const (
	// KindString is a free-form string, possibly checked by Key.Check.
	KindString Kind = iota
	// KindInt is a 64-bit integer with optional bounds.
	KindInt
	// KindBool is a boolean.
	KindBool
	// KindOptBool is a boolean that may stay unset; unset takes the
	// effective value of the key named by Key.Follows.
	KindOptBool
	// KindList is a list of strings: a TOML array (or one comma-separated
	// string), a comma-separated environment variable, or a flag that may
	// repeat and holds comma-separated entries.
	KindList
	// KindEnum is a string from Key.Enum (matched case-insensitively,
	// stored in lower case).
	KindEnum
	// KindUsers is the array of {username, password_hash} tables of
	// auth.seed_users.
	KindUsers
)

// String names the kind as documentation and messages show it.
func (k Kind) String() string {
	switch k {
	case KindString:
		return "string"
	case KindInt:
		return "integer"
	case KindBool:
		return "boolean"
	case KindOptBool:
		return "optional boolean"
	case KindList:
		return "list of strings"
	case KindEnum:
		return "enum"
	case KindUsers:
		return "array of tables"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Class says when a key is read and who owns its value afterwards.
type Class int

// The key classes.
const (
	// Bootstrap keys are read once at start; a change needs a restart.
	Bootstrap Class = iota
	// RuntimeSeed keys seed the cluster-wide runtime settings document
	// when none exists yet (S-167); afterwards the document wins.
	RuntimeSeed
	// RuntimeOnly keys are runtime settings with a built-in default and
	// no boot seed: they cannot be set at boot at all, so that one
	// cluster-wide document, not each broker's file, decides them.
	RuntimeOnly
)

// String names the class as documentation shows it.
func (c Class) String() string {
	switch c {
	case Bootstrap:
		return "bootstrap"
	case RuntimeSeed:
		return "runtime seed"
	case RuntimeOnly:
		return "runtime (no boot seed)"
	}
	return fmt.Sprintf("Class(%d)", int(c))
}

// Sources is a set of layers that may set a key. The zero value means
// "file, environment and flags"; secrets and a few special keys narrow it.
type Sources uint8

// Source bits.
const (
	FromFile Sources = 1 << iota
	FromEnv
	FromFlag

	fromAll = FromFile | FromEnv | FromFlag
)

// Key describes one configuration key. The table in keys.go is the single
// source of truth for names, defaults, mappings and validation.
type Key struct {
	// Name is the dotted TOML path, e.g. "broker.listener.bind".
	Name string
	Kind Kind
	// Default is the built-in value: string, int64, bool or []string;
	// nil for an unset optional boolean or an empty user list.
	Default any
	// DefaultNote explains what an empty default means when the real
	// value is derived later (e.g. from another key or the data dir).
	DefaultNote string
	// Env lists the environment variables for the key. The mapping is
	// explicit, never derived from the name; the first entry is the
	// canonical one and wins over later (legacy) entries.
	Env []string
	// Flags lists extra flag names (without dashes) beyond the canonical
	// --<Name>, such as the kebab-case twins kept for compatibility.
	Flags []string
	Class Class
	// Secret values never come from the file nor from flags, and are
	// redacted whenever shown.
	Secret bool
	// From restricts the layers that may set the key (zero = all).
	// Secrets default to the environment only; RuntimeOnly keys accept none.
	From Sources
	// Refusal tells the operator what to do instead when a layer outside
	// From sets the key (for secrets: the alternatives to the refused layer).
	Refusal string
	// Doc is the one-line description used in docs and the example file.
	Doc string
	// Follows names the key an unset KindOptBool takes its value from.
	Follows string
	// Enum holds the allowed values of a KindEnum key.
	Enum []string
	// Min and Max bound a KindInt key when non-nil.
	Min, Max *int64
	// Check validates a value beyond its kind (addresses, names…); it
	// receives the typed value (string, int64, bool or []string).
	Check func(v any) error
}

// FlagNames returns every accepted flag name, canonical first.
func (k *Key) FlagNames() []string { return append([]string{k.Name}, k.Flags...) }

// Allows reports whether the layer may set the key.
func (k *Key) Allows(l Layer) bool {
	if k.Class == RuntimeOnly {
		return l == LayerDefault
	}
	from := k.From
	if from == 0 {
		from = fromAll
		if k.Secret {
			from = FromEnv
		}
	}
	switch l {
	case LayerFile:
		return from&FromFile != 0
	case LayerEnv:
		return from&FromEnv != 0
	case LayerFlag:
		return from&FromFlag != 0
	}
	return true
}

// Section is the key's table path: "broker.listener" for
// "broker.listener.bind".
func (k *Key) Section() string {
	i := strings.LastIndexByte(k.Name, '.')
	return k.Name[:i]
}

// Leaf is the last part of the key: "bind" for "broker.listener.bind".
func (k *Key) Leaf() string {
	return k.Name[strings.LastIndexByte(k.Name, '.')+1:]
}

// refusal explains why a layer may not set the key and what to do instead.
func (k *Key) refusal(l Layer) string {
	if k.Class == RuntimeOnly {
		return fmt.Sprintf("a runtime setting (built-in default %s) with no boot seed; "+
			"change it through the cluster's runtime settings document, not at boot", formatValue(k, k.Default))
	}
	if !k.Secret {
		if k.Refusal != "" {
			return k.Refusal
		}
		return "not settable from the " + l.String()
	}
	alt := k.Refusal
	if alt == "" {
		alt = "set env " + k.Env[0]
	}
	if l == LayerFlag {
		return "a secret is never taken from a flag (command lines are visible to other local users); " + alt
	}
	return "a secret is never read from the config file; " + alt
}

// validate checks a typed value against the key's enum, bounds and Check.
func (k *Key) validate(v any) error {
	switch k.Kind {
	case KindEnum:
		if s := v.(string); !slices.Contains(k.Enum, s) {
			return fmt.Errorf("%q is not one of %s", s, strings.Join(k.Enum, ", "))
		}
	case KindInt:
		n := v.(int64)
		if k.Min != nil && n < *k.Min {
			return fmt.Errorf("%d is below the minimum %d", n, *k.Min)
		}
		if k.Max != nil && n > *k.Max {
			return fmt.Errorf("%d is above the maximum %d", n, *k.Max)
		}
	}
	if k.Check != nil {
		return k.Check(v)
	}
	return nil
}

// Lookup returns the key with the given name, or nil.
func Lookup(name string) *Key {
	return keyByName[name]
}

// keyByName and envIndex are built once from the table.
var (
	keyByName = map[string]*Key{}
	envIndex  = map[string]envRef{}
)

// envRef locates an environment variable in the table: its key and its
// rank among that key's variables (0 = canonical).
type envRef struct {
	key  *Key
	rank int
}

// EnvConfig names the environment variable that points at the config
// file; the flag --config does the same and wins.
const EnvConfig = "FIBRIL_CONFIG"

func init() {
	for i := range keys {
		k := &keys[i]
		if keyByName[k.Name] != nil {
			panic("config: duplicate key " + k.Name)
		}
		keyByName[k.Name] = k
		for rank, e := range k.Env {
			if _, dup := envIndex[e]; dup || e == EnvConfig {
				panic("config: environment variable " + e + " used twice")
			}
			envIndex[e] = envRef{key: k, rank: rank}
		}
	}
}

// Keys returns the key table in its documented order. The pointers refer
// to the table itself: callers must treat the keys as read-only.
func Keys() []*Key {
	out := make([]*Key, len(keys))
	for i := range keys {
		out[i] = &keys[i]
	}
	return out
}

func bound(n int64) *int64 { return &n }

// MiB is a mebibyte, for readable defaults.
const MiB = 1 << 20
