package auth

import (
	"crypto/rand"
	"crypto/subtle"
	"fmt"

	"golang.org/x/crypto/argon2"
)

// params are argon2id cost parameters.
type params struct {
	memoryKiB uint32
	passes    uint32
	lanes     uint8
}

// productionParams is what new hashes use: m=19 MiB, t=2, p=1, the first of
// OWASP's equivalent argon2id settings (RFC 9106's "second recommended"
// option needs 64 MiB). Why this point for a broker:
//
//   - Reconnect storms. After a broker restart or a network blip every
//     client re-sends AUTH at once, and each verification holds m of RAM
//     for its duration. 19 MiB keeps a burst bounded (the Authenticator
//     also caps concurrent verifications), where 64 MiB × a few hundred
//     clients would not fit a small node.
//   - Latency. t=2 over 19 MiB measured about 25 ms per verification on
//     the 2-core development machine (BenchmarkVerify), well under the
//     50 ms budget, so a storm of 1000 reconnects costs ~12 s of one core
//     instead of minutes.
//   - p=1 keeps one verification on one core, so concurrent logins spread
//     across cores instead of each fanning out and contending.
//
// Hashes with other parameters (auth.seed_users may carry any) verify with
// their own parameters; only new hashes use these.
//
// The PHC string of such a hash starts "$argon2id$v=19$m=19456,t=2,p=1$".
var productionParams = params{memoryKiB: 19 * 1024, passes: 2, lanes: 1}

// defaultParams is productionParams outside tests; tests lower it (see
// main_test.go) so that hundreds of hashes stay fast under the race
// detector. BenchmarkVerify measures productionParams.
var defaultParams = productionParams

const (
	saltBytes = 16 // RFC 9106's recommendation
	keyBytes  = 32
)

// HashPassword hashes pw with argon2id at the default parameters and a
// fresh random salt, returning the PHC string the store keeps and
// auth.seed_users accepts.
func HashPassword(pw string) (string, error) {
	h, err := newHash(pw)
	if err != nil {
		return "", err
	}
	return h.String(), nil
}

func newHash(pw string) (phc, error) {
	salt := make([]byte, saltBytes)
	if _, err := rand.Read(salt); err != nil {
		return phc{}, fmt.Errorf("hash password: %w", err)
	}
	h := phc{params: defaultParams, salt: salt}
	h.hash = derive(pw, h.salt, h.params, keyBytes)
	return h, nil
}

// verifyHook, when set by a test, is called once per argon2 verification so
// tests can count verifications instead of timing them.
var verifyHook func()

// verify reports whether pw matches h. It always runs the full derivation
// and compares in constant time, so a mismatch takes as long as a match.
func verify(pw string, h phc) bool {
	if verifyHook != nil {
		verifyHook()
	}
	got := derive(pw, h.salt, h.params, uint32(len(h.hash)))
	return subtle.ConstantTimeCompare(got, h.hash) == 1
}

func derive(pw string, salt []byte, p params, n uint32) []byte {
	return argon2.IDKey([]byte(pw), salt, p.passes, p.memoryKiB, p.lanes, n)
}

// dummyHash returns a hash at the default parameters that no password
// matches (random salt and random tag). Unknown usernames are verified
// against it so that "no such user" costs the same argon2 run as "wrong
// password" (S-146: no timing oracle).
func dummyHash() phc {
	h := phc{params: defaultParams, salt: make([]byte, saltBytes), hash: make([]byte, keyBytes)}
	_, _ = rand.Read(h.salt)
	_, _ = rand.Read(h.hash)
	return h
}
