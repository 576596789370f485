package config

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// formatValue renders a value as TOML, as the example file, the docs and
// `fibril config print` show it. It does not redact; callers do.
func formatValue(k *Key, v any) string {
	switch x := v.(type) {
	case nil:
		if k != nil && k.Kind == KindUsers {
			return "[]"
		}
		return "(unset)"
	case string:
		return tomlString(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case bool:
		return strconv.FormatBool(x)
	case []string:
		q := make([]string, len(x))
		for i, s := range x {
			q[i] = tomlString(s)
		}
		return "[" + strings.Join(q, ", ") + "]"
	case []SeedUser:
		q := make([]string, len(x))
		for i, u := range x {
			q[i] = "{ username = " + tomlString(u.Username) + ", password_hash = " + tomlString(redacted) + " }"
		}
		return "[" + strings.Join(q, ", ") + "]"
	}
	return fmt.Sprint(v)
}

// shownValue is formatValue with secrets redacted: what any message or
// listing may show.
func shownValue(k *Key, v any) string {
	if k.Secret {
		if s, _ := v.(string); s == "" {
			return `""`
		}
		return redacted
	}
	return formatValue(k, v)
}

// tomlString quotes s as a TOML basic string. strconv.Quote is not used
// because Go's \x escapes are not valid TOML.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == utf8.RuneError || r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// humanSize renders byte counts that are whole KiB/MiB/GiB, for comments.
func humanSize(n int64) string {
	for _, u := range []struct {
		size int64
		name string
	}{{1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}} {
		if n >= u.size && n%u.size == 0 {
			return fmt.Sprintf("%d %s", n/u.size, u.name)
		}
	}
	return ""
}
