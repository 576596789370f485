package config

import (
	"fmt"
	"strings"
)

// Layer names one of the four configuration layers. Later layers win.
type Layer int

// The layers in precedence order (S-166).
const (
	LayerDefault Layer = iota
	LayerFile
	LayerEnv
	LayerFlag
)

// String returns the layer's name as used in messages.
func (l Layer) String() string {
	switch l {
	case LayerDefault:
		return "default"
	case LayerFile:
		return "config file"
	case LayerEnv:
		return "environment"
	case LayerFlag:
		return "command-line flag"
	}
	return fmt.Sprintf("Layer(%d)", int(l))
}

// Origin says where one value came from. Every message about a value names
// its origin so an operator knows which of the four layers to fix.
type Origin struct {
	Layer Layer
	// Name is the file path (LayerFile), the environment variable
	// (LayerEnv) or the flag name without dashes (LayerFlag).
	Name string
	// Line is the 1-based line in the file, 0 when unknown.
	Line int
	// Follows names the key an unset optional boolean took its value from.
	Follows string
}

// String renders the origin the way messages show it: "fibril.toml:12",
// "env FIBRIL_BROKER_BIND", "flag --broker.listener.bind" or "default".
func (o Origin) String() string {
	switch o.Layer {
	case LayerFile:
		if o.Line > 0 {
			return fmt.Sprintf("%s:%d", o.Name, o.Line)
		}
		return o.Name
	case LayerEnv:
		return "env " + o.Name
	case LayerFlag:
		return "flag --" + o.Name
	}
	if o.Follows != "" {
		return "default (follows " + o.Follows + ")"
	}
	return "default"
}

var defaultOrigin = Origin{Layer: LayerDefault}

// Error is one configuration problem. Load joins all of them with
// errors.Join, so callers see every problem at once; use Problems to get
// them back as values.
type Error struct {
	// Keys are every key involved (one for a bad value, several for a
	// cross-key rule). A key inside a table list carries its index, as in
	// "auth.seed_users[1].password_hash".
	Keys []string
	// Origins holds where each of Keys got its value, index for index.
	Origins []Origin
	// Values holds each key's value as shown in the message (secrets
	// redacted); empty when the message already says enough.
	Values []string
	// Msg says what is wrong and, where it helps, what to do.
	Msg string
}

// Error formats a single-key problem as "origin: key: message" (so editors
// can jump to a file line), and a cross-key problem as the message followed
// by every key with its value and origin.
func (e *Error) Error() string {
	if len(e.Keys) == 1 {
		return fmt.Sprintf("%s: %s: %s", e.Origins[0], e.Keys[0], e.Msg)
	}
	parts := make([]string, len(e.Keys))
	for i, k := range e.Keys {
		v := ""
		if i < len(e.Values) && e.Values[i] != "" {
			v = " = " + e.Values[i]
		}
		parts[i] = fmt.Sprintf("%s%s (%s)", k, v, e.Origins[i])
	}
	return e.Msg + " [" + strings.Join(parts, "; ") + "]"
}

// keyError builds a single-key Error.
func keyError(key string, o Origin, format string, args ...any) *Error {
	return &Error{Keys: []string{key}, Origins: []Origin{o}, Msg: fmt.Sprintf(format, args...)}
}

// Problems unpacks the error returned by Load into its individual problems.
// Errors that are not configuration problems (none today) are skipped.
func Problems(err error) []*Error {
	var out []*Error
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case nil:
		case *Error:
			out = append(out, e)
		case interface{ Unwrap() []error }:
			for _, inner := range e.Unwrap() {
				walk(inner)
			}
		}
	}
	walk(err)
	return out
}

// Warning is a problem that does not stop startup, such as an unknown
// FIBRIL_* environment variable (client SDKs share the prefix in the same
// container). Load returns warnings for the caller to log.
type Warning struct {
	// Subject is what the warning is about: an environment variable or a key.
	Subject string
	Msg     string
}

// String renders the warning as one line.
func (w Warning) String() string { return w.Subject + ": " + w.Msg }
