package auth

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fibrilgo/fibril/core"
	"golang.org/x/crypto/argon2"
)

func TestHashPasswordRoundTrip(t *testing.T) {
	s, err := HashPassword("correct horse")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(s, "$argon2id$v=19$m=64,t=1,p=1$") {
		t.Fatalf("unexpected PHC prefix: %s", s)
	}
	h, err := parsePHC(s)
	if err != nil {
		t.Fatalf("own output does not parse: %v", err)
	}
	if h.String() != s {
		t.Fatalf("String() = %q, want %q", h.String(), s)
	}
	if !verify("correct horse", h) {
		t.Fatal("right password rejected")
	}
	if verify("correct horse!", h) {
		t.Fatal("wrong password accepted")
	}
	s2, _ := HashPassword("correct horse")
	if s2 == s {
		t.Fatal("two hashes of one password are equal: salt is not random")
	}
}

func TestProductionParamsPHC(t *testing.T) {
	h := phc{params: productionParams, salt: make([]byte, 16), hash: make([]byte, 32)}
	if got := h.String(); !strings.HasPrefix(got, "$argon2id$v=19$m=19456,t=2,p=1$") {
		t.Fatalf("production PHC prefix = %s", got)
	}
}

// A hash produced outside HashPassword, with parameters that differ from
// the defaults in every position and a 24-byte tag, verifies with its own
// parameters: m, t, p and the tag length are read from the string, not
// assumed.
func TestVerifyForeignParameters(t *testing.T) {
	salt := []byte("somesaltsomesalt")
	tag := argon2.IDKey([]byte("password"), salt, 3, 256, 2, 24)
	s := fmt.Sprintf("$argon2id$v=19$t=3,p=2,m=256$%s$%s",
		base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(tag))
	h, err := parsePHC(s)
	if err != nil {
		t.Fatal(err)
	}
	if !verify("password", h) {
		t.Fatal("foreign hash did not verify")
	}
	if verify("passwore", h) {
		t.Fatal("foreign hash accepted a wrong password")
	}
}

func TestValidatePHCErrors(t *testing.T) {
	const salt, hash = "c2FsdHNhbHRzYWx0", "aGFzaGhhc2hoYXNoaGFzaGhhc2hoYXNoaGFzaA"
	ok := "$argon2id$v=19$m=65536,t=3,p=4$" + salt + "$" + hash
	if err := ValidatePHC(ok); err != nil {
		t.Fatalf("valid PHC rejected: %v", err)
	}
	if err := ValidatePHC("$argon2id$v=19$t=3,p=4,m=65536$" + salt + "$" + hash); err != nil {
		t.Fatalf("parameters in another order rejected: %v", err)
	}
	cases := map[string]string{
		"plain password":   "hunter2",
		"empty":            "",
		"argon2i":          "$argon2i$v=19$m=65536,t=3,p=4$" + salt + "$" + hash,
		"bcrypt":           "$2b$12$abcdefghijklmnopqrstuuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ01",
		"old version":      "$argon2id$v=16$m=65536,t=3,p=4$" + salt + "$" + hash,
		"no version":       "$argon2id$m=65536,t=3,p=4$" + salt + "$" + hash,
		"missing p":        "$argon2id$v=19$m=65536,t=3$" + salt + "$" + hash,
		"duplicate m":      "$argon2id$v=19$m=65536,m=1,t=3$" + salt + "$" + hash,
		"unknown param":    "$argon2id$v=19$m=65536,t=3,p=4,x=1$" + salt + "$" + hash,
		"zero t":           "$argon2id$v=19$m=65536,t=0,p=4$" + salt + "$" + hash,
		"m below 8p":       "$argon2id$v=19$m=16,t=3,p=4$" + salt + "$" + hash,
		"m too large":      "$argon2id$v=19$m=4000000000,t=3,p=4$" + salt + "$" + hash,
		"t too large":      "$argon2id$v=19$m=65536,t=1000,p=4$" + salt + "$" + hash,
		"p too large":      "$argon2id$v=19$m=65536,t=3,p=256$" + salt + "$" + hash,
		"padded salt":      "$argon2id$v=19$m=65536,t=3,p=4$c2FsdHNhbHRzYWx0c2E=$" + hash,
		"short salt":       "$argon2id$v=19$m=65536,t=3,p=4$c2FsdA$" + hash,
		"short hash":       "$argon2id$v=19$m=65536,t=3,p=4$" + salt + "$aGFzaA",
		"bad base64 hash":  "$argon2id$v=19$m=65536,t=3,p=4$" + salt + "$***",
		"trailing field":   ok + "$extra",
		"no leading $":     ok[1:],
		"negative memory":  "$argon2id$v=19$m=-1,t=3,p=4$" + salt + "$" + hash,
		"non-numeric pass": "$argon2id$v=19$m=65536,t=x,p=4$" + salt + "$" + hash,
	}
	for name, s := range cases {
		err := ValidatePHC(s)
		if err == nil {
			t.Errorf("%s: accepted %q", name, s)
			continue
		}
		if !errors.Is(err, core.ErrBadRequest) {
			t.Errorf("%s: error does not wrap ErrBadRequest: %v", name, err)
		}
		if s != "" && strings.Contains(err.Error(), s) {
			t.Errorf("%s: error echoes the input: %v", name, err)
		}
	}
}
