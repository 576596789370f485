package auth

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/fibrilgo/fibril/core"
)

// NodePrincipal is the reserved username brokers use to authenticate to each
// other with the cluster secret (S-146, S-149, docs/protocol.md#owner-side).
const NodePrincipal = "@node"

// DefaultUser and DefaultPassword are the built-in login accepted from
// loopback peers while auth.allow_default_loopback is on and no stored user
// of that name exists (S-146).
const (
	DefaultUser     = "fibril"
	DefaultPassword = "fibril"
)

// MaxUsernameBytes bounds a username. Names travel in AUTH frames, logs and
// FORWARDED_SESSION bodies and may come from certificate SANs (S-154), so
// they stay short; 128 bytes fits any DNS name a certificate would carry
// plus room for e-mail-like names.
const MaxUsernameBytes = 128

// MaxPasswordBytes bounds a stored password. argon2 pre-hashes its input,
// so length costs little, but an unbounded field invites mistakes such as
// pasting a file; 1 KiB is far beyond any sane passphrase.
const MaxPasswordBytes = 1024

// ValidateUsername applies the naming rules of the store: non-empty, at most
// MaxUsernameBytes of valid UTF-8, no spaces or control characters, and not
// starting with '@' (reserved for principals such as @node, S-147). The
// rules match config's checks on auth.seed_users plus the length bound, so
// every seed the config accepts within that length is storable.
func ValidateUsername(name string) error {
	switch {
	case name == "":
		return core.Errorf(core.ErrBadRequest, "the username is empty")
	case strings.HasPrefix(name, "@"):
		return core.Errorf(core.ErrBadRequest, "username %q starts with '@', which is reserved for broker principals such as @node", name)
	case len(name) > MaxUsernameBytes:
		return core.Errorf(core.ErrBadRequest, "username is %d bytes long; the limit is %d", len(name), MaxUsernameBytes)
	case !utf8.ValidString(name):
		return core.Errorf(core.ErrBadRequest, "username %q is not valid UTF-8", name)
	case strings.IndexFunc(name, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
		return core.Errorf(core.ErrBadRequest, "username %q contains a space or control character", name)
	}
	return nil
}

// validatePassword checks a plain password before it is hashed.
func validatePassword(name, pw string) error {
	switch {
	case pw == "":
		return core.Errorf(core.ErrBadRequest, "user %q: the password is empty", name)
	case len(pw) > MaxPasswordBytes:
		return core.Errorf(core.ErrBadRequest, "user %q: the password is %d bytes long; the limit is %d", name, len(pw), MaxPasswordBytes)
	}
	return nil
}
