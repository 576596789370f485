package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Contexts: the broker and admin addresses, credentials and TLS settings
// come from flags, from the environment, or from an env file of KEY=VALUE
// lines with the same variable names; flags win over the environment,
// which wins over the file.

// envVars are the variables fibrilctl reads, the ones an env file may set.
var envVars = []struct{ name, flag string }{
	{"FIBRIL_ADDR", "--addr"},
	{"FIBRIL_USER", "--user"},
	{"FIBRIL_PASSWORD", "--password"},
	{"FIBRIL_TLS", "--tls"},
	{"FIBRIL_CA", "--ca"},
	{"FIBRIL_INSECURE", "--insecure"},
	{"FIBRIL_ADMIN_ADDR", "--admin"},
	{"FIBRIL_ADMIN_USER", "--admin-user"},
	{"FIBRIL_ADMIN_PASSWORD", "--admin-password"},
	{"FIBRIL_ADMIN_TLS", "--admin-tls"},
	{"FIBRIL_TIMEOUT", "--timeout"},
	{"FIBRIL_PLUGINS_CATALOG", "plugins list --catalog"},
}

func knownEnvVar(name string) bool {
	return slices.ContainsFunc(envVars, func(v struct{ name, flag string }) bool { return v.name == name })
}

// envFileVar names the env file (when --env-file does not).
const envFileVar = "FIBRILCTL_ENV_FILE"

// defaultEnvFile is $XDG_CONFIG_HOME/fibrilctl/env, else
// $HOME/.config/fibrilctl/env ("" when neither variable is set). It is
// read when it exists. Both come through e.getenv, so tests never see the
// real home directory.
func defaultEnvFile(e *env) string {
	if d := e.getenv("XDG_CONFIG_HOME"); d != "" {
		return filepath.Join(d, "fibrilctl", "env")
	}
	if h := e.getenv("HOME"); h != "" {
		return filepath.Join(h, ".config", "fibrilctl", "env")
	}
	return ""
}

// envFileFlag finds --env-file PATH (or --env-file=PATH, one dash or two)
// among args, before a "--": it has to be known before the other flags'
// defaults are.
func envFileFlag(args []string) (path string, set bool, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "env-file" {
			continue
		}
		if !hasVal {
			if i+1 >= len(args) {
				return "", false, usagef("flag needs an argument: --env-file")
			}
			i++
			val = args[i]
		}
		path, set = val, true
	}
	return path, set, nil
}

// withEnvFile returns e with getenv falling back to the env file's values
// (the real environment wins): the file --env-file names, else
// $FIBRILCTL_ENV_FILE, else the default one when it exists.
func withEnvFile(e *env, args []string) (*env, error) {
	path, explicit, err := envFileFlag(args)
	if err != nil {
		return nil, err
	}
	if !explicit {
		if path = e.getenv(envFileVar); path != "" {
			explicit = true
		} else {
			path = defaultEnvFile(e)
		}
	}
	if path == "" {
		return e, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		if !explicit && errors.Is(err, fs.ErrNotExist) {
			return e, nil
		}
		return nil, fmt.Errorf("env file: %w", err)
	}
	vals, err := parseEnvFile(path, data)
	if err != nil {
		return nil, err
	}
	real := e.getenv
	out := *e
	out.getenv = func(k string) string {
		if v := real(k); v != "" {
			return v
		}
		return vals[k]
	}
	out.envSource = func(k string) string {
		if real(k) != "" {
			return "the environment"
		}
		return "env file " + path
	}
	return &out, nil
}

var envKeyRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// parseEnvFile reads KEY=VALUE lines: blank lines and lines starting with
// # are skipped, an "export " prefix is allowed, and a value may be quoted
// with "..." or '...' (taken as written, no escapes). Only the variables
// of envVars may be set: a typo is an error rather than silently ignored.
func parseEnvFile(path string, data []byte) (map[string]string, error) {
	vals := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		bad := func(format string, a ...any) error {
			return &usageError{fmt.Sprintf("env file %s line %d: %s", path, n, fmt.Sprintf(format, a...))}
		}
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		key, val, ok := strings.Cut(line, "=")
		key = strings.TrimSpace(key)
		if !ok {
			return nil, bad("not KEY=VALUE")
		}
		if !envKeyRE.MatchString(key) {
			return nil, bad("%q is not a variable name", key)
		}
		if !knownEnvVar(key) {
			return nil, bad("unknown variable %s (known: %s)", key, knownEnvNames())
		}
		val = strings.TrimSpace(val)
		if len(val) > 0 && (val[0] == '"' || val[0] == '\'') {
			if len(val) < 2 || val[len(val)-1] != val[0] {
				return nil, bad("unterminated quote in the value of %s", key)
			}
			val = val[1 : len(val)-1]
		}
		vals[key] = val
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("env file %s: %w", path, err)
	}
	return vals, nil
}

func knownEnvNames() string {
	names := make([]string, len(envVars))
	for i, v := range envVars {
		names[i] = v.name
	}
	return strings.Join(names, ", ")
}
