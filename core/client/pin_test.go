package client

import (
	"strings"
	"testing"
)

// A pin is taken in the form the broker logs (AB:CD:…) or as plain hex in
// either case; anything that is not 32 bytes of hex is refused up front.
func TestPinnedTLSFingerprintForms(t *testing.T) {
	plain := strings.Repeat("ab", 32)
	colon := strings.ToUpper(strings.TrimSuffix(strings.Repeat("ab:", 32), ":"))
	for _, fp := range []string{plain, colon, " " + plain + " "} {
		if cfg, err := PinnedTLS(fp); err != nil || cfg.VerifyConnection == nil || !cfg.InsecureSkipVerify {
			t.Fatalf("PinnedTLS(%q) = %v, %v", fp, cfg, err)
		}
	}
	for _, fp := range []string{"", "abcd", plain + "ab", strings.Repeat("zz", 32)} {
		if _, err := PinnedTLS(fp); err == nil {
			t.Fatalf("PinnedTLS(%q) accepted", fp)
		}
	}
	if err := checkPin(make([]byte, 32), nil); err == nil {
		t.Fatal("an empty chain satisfied the pin")
	}
}
