package config

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Conversion of raw values into the table's value types. The TOML file is
// typed, so it is converted strictly (a string "100" is not an integer);
// the environment and flags only carry strings, which are parsed.

// fromTOML converts a value decoded from the TOML file. Users are handled
// by usersFromTOML because their errors need per-entry lines.
func fromTOML(k *Key, v any) (any, error) {
	switch k.Kind {
	case KindString:
		if s, ok := v.(string); ok {
			return s, nil
		}
	case KindEnum:
		if s, ok := v.(string); ok {
			return strings.ToLower(strings.TrimSpace(s)), nil
		}
	case KindInt:
		switch n := v.(type) {
		case int64:
			return n, nil
		case float64:
			if n == math.Trunc(n) && math.Abs(n) < 1<<62 {
				return nil, fmt.Errorf("expected an integer, got the float %v (write it without a decimal point)", n)
			}
		}
	case KindBool, KindOptBool:
		if b, ok := v.(bool); ok {
			return b, nil
		}
		if s, ok := v.(string); ok {
			return nil, fmt.Errorf("expected a boolean, got the string %q (write true or false without quotes)", s)
		}
	case KindList:
		switch x := v.(type) {
		case string:
			return splitList(x), nil
		case []any:
			out := make([]string, 0, len(x))
			for i, e := range x {
				s, ok := e.(string)
				if !ok {
					return nil, fmt.Errorf("entry %d: expected a string, got %s", i+1, tomlType(e))
				}
				if s = strings.TrimSpace(s); s != "" {
					out = append(out, s)
				}
			}
			return out, nil
		}
	}
	return nil, fmt.Errorf("expected %s, got %s", expectation(k), tomlType(v))
}

// fromString parses a value given as text by an environment variable or a
// flag.
func fromString(k *Key, s string) (any, error) {
	switch k.Kind {
	case KindString:
		return s, nil
	case KindEnum:
		return strings.ToLower(strings.TrimSpace(s)), nil
	case KindInt:
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil {
			var ne *strconv.NumError
			if errors.As(err, &ne) && errors.Is(ne.Err, strconv.ErrRange) {
				return nil, fmt.Errorf("%q is out of range for an integer", s)
			}
			return nil, fmt.Errorf("%q is not an integer", s)
		}
		return n, nil
	case KindBool, KindOptBool:
		return parseBool(s)
	case KindList:
		return splitList(s), nil
	}
	return nil, fmt.Errorf("cannot be given as text (expected %s)", expectation(k))
}

// parseBool accepts the spellings container environments commonly use.
func parseBool(s string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "true", "1", "yes", "on", "t":
		return true, nil
	case "false", "0", "no", "off", "f":
		return false, nil
	}
	return false, fmt.Errorf("%q is not a boolean (use true or false)", s)
}

// splitList splits a comma-separated list, trimming entries and dropping
// empty ones, so "a, b," is [a b].
func splitList(s string) []string {
	out := []string{}
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// expectation describes the accepted form of a key's value.
func expectation(k *Key) string {
	switch k.Kind {
	case KindString:
		return "a string"
	case KindEnum:
		return "one of " + strings.Join(k.Enum, ", ")
	case KindInt:
		return "an integer"
	case KindBool, KindOptBool:
		return "a boolean"
	case KindList:
		return "an array of strings"
	case KindUsers:
		return "an array of tables ([[" + k.Name + "]])"
	}
	return k.Kind.String()
}

// tomlType names the TOML type of a decoded value for messages.
func tomlType(v any) string {
	switch x := v.(type) {
	case string:
		return fmt.Sprintf("the string %q", x)
	case int64:
		return fmt.Sprintf("the integer %d", x)
	case float64:
		return fmt.Sprintf("the float %v", x)
	case bool:
		return fmt.Sprintf("the boolean %v", x)
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	}
	return "a date/time"
}

// userFields are the keys of one [[auth.seed_users]] table.
var userFields = []string{"username", "password_hash"}

// usersFromTOML converts auth.seed_users entries. lineOf returns the line
// of a path such as "auth.seed_users[1].username". Every problem of every
// entry is reported.
func usersFromTOML(k *Key, v any, origin Origin, lineOf func(string) int) ([]SeedUser, []error) {
	list, ok := v.([]any)
	if !ok {
		return nil, []error{keyError(k.Name, origin, "expected %s, got %s", expectation(k), tomlType(v))}
	}
	var errs []error
	users := make([]SeedUser, 0, len(list))
	seen := map[string]int{}
	for i, e := range list {
		entry := fmt.Sprintf("%s[%d]", k.Name, i)
		at := func(field string) Origin {
			o := origin
			if l := lineOf(entry + "." + field); l > 0 {
				o.Line = l
			} else if l := lineOf(entry); l > 0 {
				o.Line = l
			}
			return o
		}
		fail := func(field, format string, args ...any) {
			name := entry
			if field != "" {
				name += "." + field
			}
			errs = append(errs, keyError(name, at(field), format, args...))
		}
		t, ok := e.(map[string]any)
		if !ok {
			fail("", "expected a table {username, password_hash}, got %s", tomlType(e))
			continue
		}
		var u SeedUser
		for _, field := range slices.Sorted(maps.Keys(t)) {
			fv := t[field]
			s, isString := fv.(string)
			switch {
			case field == "password":
				fail(field, "plain passwords never come from the config file; store an argon2id hash as password_hash, "+
					"or set the env pair FIBRIL_AUTH_USERNAME + FIBRIL_AUTH_PASSWORD")
			case field != "username" && field != "password_hash":
				fail(field, "unknown field (a seed user has only %s)", strings.Join(userFields, " and "))
			case !isString:
				fail(field, "expected a string, got %s", tomlType(fv))
			case field == "username":
				u.Username = s
			default:
				u.PasswordHash = s
			}
		}
		if _, has := t["username"]; !has {
			fail("", "missing username")
		} else if err := checkUsername(u.Username); err != nil {
			fail("username", "%v", err)
		} else if j, dup := seen[u.Username]; dup {
			fail("username", "user %q is already listed as %s[%d]", u.Username, k.Name, j)
		} else {
			seen[u.Username] = i
		}
		if _, has := t["password_hash"]; !has {
			if _, plain := t["password"]; !plain {
				fail("", "missing password_hash (an argon2id PHC string)")
			}
		} else if err := checkArgon2idPHC(u.PasswordHash); err != nil {
			fail("password_hash", "%v", err)
		}
		users = append(users, u)
	}
	return users, errs
}
