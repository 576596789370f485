package core

import (
	"strings"
	"unicode/utf8"
)

// CheckKey applies the key syntax of KV (non-empty, UTF-8, no leading
// '/'). Every backend calls it, so code tested against the in-memory
// coordinator behaves the same on a real one.
func CheckKey(key string) error {
	if key == "" {
		return Errorf(ErrBadRequest, "coordination: empty key")
	}
	return CheckPrefix(key)
}

// CheckPrefix is CheckKey for a List or Watch prefix, which may be empty.
func CheckPrefix(prefix string) error {
	switch {
	case strings.HasPrefix(prefix, "/"):
		return Errorf(ErrBadRequest, "coordination: key %q starts with '/'", prefix)
	case !utf8.ValidString(prefix):
		return Errorf(ErrBadRequest, "coordination: key %q is not UTF-8", prefix)
	}
	return nil
}

// CheckWritableKey is CheckKey that also refuses the keys reserved for
// backends ("_…"), so a stray write cannot break an election lock.
func CheckWritableKey(key string) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	if strings.HasPrefix(key, "_") {
		return Errorf(ErrBadRequest, "coordination: key %q is reserved for the backend", key)
	}
	return nil
}
