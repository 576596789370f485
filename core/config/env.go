package config

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
)

// envPrefix marks the variables the loader looks at.
const envPrefix = "FIBRIL_"

// envLayer is what the environment contributes.
type envLayer struct {
	settings   []setting
	configPath string // FIBRIL_CONFIG, "" when unset
	warnings   []Warning
	errs       []error
}

// envHit is one known variable found for a key.
type envHit struct {
	name, value string
	rank        int
}

// parseEnv reads FIBRIL_* variables from environ ("NAME=value" entries,
// as os.Environ returns them).
//
// Unknown FIBRIL_* names only warn: client SDKs running in the same
// container share the prefix, so failing on them would break real
// deployments. A name within two edits of a known one is called out as a
// likely typo. An empty value counts as unset, the way orchestrators
// render an unset template variable. When a key's canonical and legacy
// variables are both set, the canonical one wins and a differing legacy
// value is reported as ignored.
func parseEnv(environ []string) envLayer {
	var l envLayer
	values := map[string]string{}
	for _, kv := range environ {
		name, val, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(name, envPrefix) {
			continue
		}
		if _, dup := values[name]; !dup { // the first one wins, as with os.Getenv
			values[name] = val
		}
	}

	hits := map[*Key][]envHit{}
	for _, name := range slices.Sorted(maps.Keys(values)) {
		val := values[name]
		if name == EnvConfig {
			l.configPath = val
			continue
		}
		if ref, ok := secretFileVar(name); ok && !isEnvName(name) {
			if val == "" {
				continue
			}
			o := Origin{Layer: LayerEnv, Name: name}
			if base := strings.TrimSuffix(name, fileSuffix); values[base] != "" {
				l.errs = append(l.errs, keyError(ref.key.Name, o, "set %s or %s, not both", base, name))
				continue
			}
			secret, err := readSecretFile(val)
			if err != nil {
				l.errs = append(l.errs, keyError(ref.key.Name, o, "%v", err))
				continue
			}
			hits[ref.key] = append(hits[ref.key], envHit{name: name, value: secret, rank: ref.rank})
			continue
		}
		ref, known := envIndex[name]
		if !known {
			l.warnings = append(l.warnings, unknownEnvWarning(name))
			continue
		}
		if val == "" {
			continue
		}
		if !ref.key.Allows(LayerEnv) {
			o := Origin{Layer: LayerEnv, Name: name}
			l.errs = append(l.errs, keyError(ref.key.Name, o, "cannot be set from the environment: %s", ref.key.refusal(LayerEnv)))
			continue
		}
		hits[ref.key] = append(hits[ref.key], envHit{name: name, value: val, rank: ref.rank})
	}

	for i := range keys {
		k := &keys[i]
		h := hits[k]
		if len(h) == 0 {
			continue
		}
		slices.SortFunc(h, func(a, b envHit) int { return a.rank - b.rank })
		win := h[0]
		for _, other := range h[1:] {
			if other.value != win.value {
				l.warnings = append(l.warnings, Warning{Subject: other.name,
					Msg: fmt.Sprintf("ignored: %s is set too and takes precedence for %s", win.name, k.Name)})
			}
		}
		o := Origin{Layer: LayerEnv, Name: win.name}
		v, err := fromString(k, win.value)
		if err == nil {
			err = k.validate(v)
		}
		if err != nil {
			l.errs = append(l.errs, keyError(k.Name, o, "%v", err))
			continue
		}
		l.settings = append(l.settings, setting{key: k, value: v, origin: o})
	}
	return l
}

// fileSuffix turns a secret's variable into the variable naming a file
// that holds it (FIBRIL_AUTH_PASSWORD_FILE=/run/secrets/app): the way
// Docker and Kubernetes hand secrets to a process, without putting them
// in the environment every child process and `docker inspect` sees.
const fileSuffix = "_FILE"

// secretFileVar reports whether name is the _FILE form of a secret key's
// variable. A variable of its own by that name (FIBRIL_ADMIN_AUTH_PASSWORD_FILE
// is admin.auth.password_file's, which does the same) is not one.
func secretFileVar(name string) (envRef, bool) {
	base, ok := strings.CutSuffix(name, fileSuffix)
	if !ok {
		return envRef{}, false
	}
	ref, known := envIndex[base]
	return ref, known && ref.key.Secret
}

func isEnvName(name string) bool { _, ok := envIndex[name]; return ok }

// readSecretFile reads a secret from a file: one value, without the line
// break an editor or `echo` leaves at its end.
func readSecretFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("cannot read the secret file: %v", err)
	}
	v := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if v == "" {
		return "", fmt.Errorf("the secret file %s is empty", path)
	}
	return v, nil
}

// unknownEnvWarning words the warning for an unknown FIBRIL_* variable.
func unknownEnvWarning(name string) Warning {
	if n := nearest(name, envNames()); n != "" {
		return Warning{Subject: name, Msg: "unknown variable, ignored; probably a typo for " + n}
	}
	return Warning{Subject: name, Msg: "not a broker setting, ignored (client SDKs share the FIBRIL_ prefix, so this is not an error)"}
}
