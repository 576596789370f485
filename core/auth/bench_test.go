package auth

import (
	"context"
	"testing"
)

// BenchmarkVerify measures one argon2id verification at the production
// parameters (the tests otherwise run with cheap ones). The budget is
// well under 50 ms per verification on a small 2-core node.
func BenchmarkVerify(b *testing.B) {
	h := phc{params: productionParams, salt: []byte("0123456789abcdef")}
	h.hash = derive("password", h.salt, h.params, keyBytes)
	b.ReportAllocs()
	for b.Loop() {
		if !verify("password", h) {
			b.Fatal("did not verify")
		}
	}
}

// BenchmarkCheckUnknownUser is a whole login attempt for a name that does
// not exist, at the production parameters: one verification against the
// dummy hash, so it should cost the same as BenchmarkVerify.
func BenchmarkCheckUnknownUser(b *testing.B) {
	saved := defaultParams
	defaultParams = productionParams
	a := NewAuthenticator(Options{})
	defaultParams = saved
	ctx := context.Background()
	for b.Loop() {
		if _, err := a.Check(ctx, "nobody", "password", remote4); err == nil {
			b.Fatal("accepted")
		}
	}
}
