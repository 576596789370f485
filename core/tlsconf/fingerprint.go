package tlsconf

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Fingerprint returns the SHA-256 of a DER certificate as upper-case hex
// pairs joined by colons (AB:CD:…), the form openssl and browsers print and
// the one operators paste into SDK pinning settings (S-152).
func Fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	h := strings.ToUpper(hex.EncodeToString(sum[:]))
	var b strings.Builder
	b.Grow(len(h) + len(h)/2)
	for i := 0; i < len(h); i += 2 {
		if i > 0 {
			b.WriteByte(':')
		}
		b.WriteString(h[i : i+2])
	}
	return b.String()
}

// sha256Hex returns the SHA-256 of der as plain lower-case hex, the form
// of the admin API's leaf_sha256 field (S-153).
func sha256Hex(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}
