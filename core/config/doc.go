// Package config loads, validates and documents the broker's startup
// configuration.
//
// Everything the broker can be configured with is described once, in the key
// table of keys.go: name, type, default, environment variable(s), flag(s),
// class, secrecy, description and validation. The loader, the validation, the
// generated example file (fibril.example.toml), the generated reference
// (docs/configuration.md) and `fibril config print` all read that table, so
// they cannot drift apart; tests check that the Config struct and the table
// agree field for field.
//
// Values are layered, lowest first (S-166, docs/semantics.md):
//
//	built-in defaults < TOML file (--config or FIBRIL_CONFIG) < FIBRIL_* environment < flags
//
// Two classes of keys exist. Bootstrap keys are read at start and need a
// restart to change. Runtime keys belong to the cluster-wide runtime settings
// document: the runtime_seed.* keys only seed that document when none exists
// yet (S-167), and the routing.* keys have built-in defaults and no boot seed
// at all, so setting one at boot is an error that says where to change it.
//
// Load is a pure function of its arguments (command-line arguments and an
// environment slice) apart from reading the named config file, which keeps
// tests hermetic. It reports every problem at once, each naming the key and
// where its value came from (a file line, an environment variable, a flag or
// the default).
package config
