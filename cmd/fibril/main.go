// Command fibril is the broker. For now it loads, validates and prints its
// configuration; serving comes next.
package main

import "os"

//go:generate go run . config example -o ../../fibril.example.toml
//go:generate go run . config docs -o ../../docs/configuration.md

func main() {
	os.Exit(run(os.Args[1:], os.Environ(), os.Stdout, os.Stderr))
}
