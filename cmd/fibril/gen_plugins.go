package main

// The built-in plugins are listed in plugins.toml; this turns the list into
// plugins_gen.go (blank imports) and plugins/host/builtins_gen.go (the table
// fibrilctl shows). plugins/internal/genimports' test fails while either
// disagrees with plugins.toml.
//go:generate go run ../../plugins/internal/genimports -toml ../../plugins.toml -imports plugins_gen.go -table ../../plugins/host/builtins_gen.go
