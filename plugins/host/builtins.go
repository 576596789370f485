package host

import "slices"

// BuiltinPlugin is one built-in plugin declared in plugins.toml.
type BuiltinPlugin struct {
	Kind    string
	Name    string
	Package string
}

// DeclaredBuiltins lists the built-in plugins plugins.toml compiles into
// the fibril binary (generated into builtins_gen.go), sorted by kind and
// name. Unlike the registry, it does not depend on which packages the
// running binary linked: fibrilctl uses it to list the broker's
// built-ins without linking every backend itself.
func DeclaredBuiltins() []BuiltinPlugin {
	return slices.Clone(declaredBuiltins)
}
