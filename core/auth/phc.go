package auth

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"

	"github.com/fibrilgo/fibril/core"
)

// phc is a parsed argon2id hash in PHC string form:
//
//	$argon2id$v=19$m=<KiB>,t=<passes>,p=<lanes>$<salt>$<hash>
//
// with salt and hash in unpadded standard base64. It is the only hash form
// the store reads or writes, the same form auth.seed_users carries and the
// one common tools (argon2 CLI, libsodium, passlib) print.
type phc struct {
	params
	salt []byte
	hash []byte
}

// Bounds on parameters a PHC string may carry. They keep a hostile or
// mistyped hash (m=4000000000) from turning one login into an out-of-memory
// crash, and the salt/hash minimums follow RFC 9106 (salt ≥ 8 bytes; a tag
// below 16 bytes is too short to be a password hash).
const (
	maxMemoryKiB = 1 << 20 // 1 GiB
	maxPasses    = 32
	maxLanes     = 255 // x/crypto/argon2 takes the lane count as a uint8
	minSaltBytes = 8
	maxSaltBytes = 64
	minHashBytes = 16
	maxHashBytes = 64
)

const phcForm = "expected an argon2id PHC string ($argon2id$v=19$m=…,t=…,p=…$salt$hash)"

// ValidatePHC reports whether s is an argon2id PHC string the store accepts.
// The error wraps core.ErrBadRequest and never echoes s (it is a secret's
// derivative, and a mistake here is often a pasted plain password).
func ValidatePHC(s string) error {
	_, err := parsePHC(s)
	return err
}

func parsePHC(s string) (phc, error) {
	bad := func(format string, args ...any) (phc, error) {
		if format == "" {
			return phc{}, core.Errorf(core.ErrBadRequest, "%s", phcForm)
		}
		return phc{}, core.Errorf(core.ErrBadRequest, "%s; %s", phcForm, fmt.Sprintf(format, args...))
	}
	parts := strings.Split(s, "$")
	if len(parts) != 6 || parts[0] != "" {
		return bad("")
	}
	if parts[1] != "argon2id" {
		return bad("algorithm %q is not argon2id", parts[1])
	}
	if parts[2] != "v=19" {
		return bad("version %q is not v=19", parts[2])
	}
	var out phc
	seen := map[string]bool{}
	for _, kv := range strings.Split(parts[3], ",") {
		name, val, ok := strings.Cut(kv, "=")
		n, err := strconv.ParseUint(val, 10, 32)
		if !ok || err != nil || n == 0 || seen[name] {
			return bad("bad parameter %q", kv)
		}
		seen[name] = true
		switch name {
		case "m":
			out.memoryKiB = uint32(n)
		case "t":
			out.passes = uint32(n)
		case "p":
			if n > maxLanes {
				return bad("p=%d is above %d", n, maxLanes)
			}
			out.lanes = uint8(n)
		default:
			return bad("unknown parameter %q", name)
		}
	}
	if len(seen) != 3 {
		return bad("parameters m, t and p are all required")
	}
	if out.memoryKiB < 8*uint32(out.lanes) || out.memoryKiB > maxMemoryKiB {
		return bad("m=%d must be between 8×p and %d KiB", out.memoryKiB, maxMemoryKiB)
	}
	if out.passes > maxPasses {
		return bad("t=%d is above %d", out.passes, maxPasses)
	}
	var err error
	if out.salt, err = base64.RawStdEncoding.Strict().DecodeString(parts[4]); err != nil ||
		len(out.salt) < minSaltBytes || len(out.salt) > maxSaltBytes {
		return bad("the salt must be %d to %d bytes of unpadded base64", minSaltBytes, maxSaltBytes)
	}
	if out.hash, err = base64.RawStdEncoding.Strict().DecodeString(parts[5]); err != nil ||
		len(out.hash) < minHashBytes || len(out.hash) > maxHashBytes {
		return bad("the hash must be %d to %d bytes of unpadded base64", minHashBytes, maxHashBytes)
	}
	return out, nil
}

// String formats the hash back into PHC form.
func (h phc) String() string {
	return fmt.Sprintf("$argon2id$v=19$m=%d,t=%d,p=%d$%s$%s",
		h.memoryKiB, h.passes, h.lanes,
		base64.RawStdEncoding.EncodeToString(h.salt),
		base64.RawStdEncoding.EncodeToString(h.hash))
}
