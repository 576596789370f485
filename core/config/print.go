package config

import (
	"fmt"
	"io"
	"strings"
)

// WriteEffective writes the effective configuration as TOML-like text,
// every value followed by a comment naming where it came from, secrets
// redacted. It is what `fibril config print` shows.
func WriteEffective(w io.Writer, cfg *Config, ld *Loaded) error {
	var b strings.Builder
	file := "none"
	if ld.ConfigFile != "" {
		file = ld.ConfigFile
	}
	b.WriteString("# Effective configuration. Config file: " + file + ".\n")
	b.WriteString("# Each value is followed by its origin; secrets are redacted.\n")

	write := func(class Class) {
		for _, s := range sections(func(k *Key) bool { return k.Class == class }) {
			b.WriteString("\n[" + s.path + "]\n")
			for _, k := range s.keys {
				v, _ := ValueOf(cfg, k.Name)
				fmt.Fprintf(&b, "%s = %s  # %s\n", k.Leaf(), shownValue(k, v), ld.Source(k.Name))
			}
		}
	}
	write(Bootstrap)
	b.WriteString("\n# Runtime seeds: used only when the cluster has no runtime settings document yet.\n")
	write(RuntimeSeed)
	b.WriteString("\n# Runtime settings with no boot seed (built-in defaults; changed through the runtime settings document):\n")
	for i := range keys {
		if k := &keys[i]; k.Class == RuntimeOnly {
			fmt.Fprintf(&b, "# %s = %s\n", k.Name, formatValue(k, k.Default))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
