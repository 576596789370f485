package queue

import (
	"testing"

	"github.com/fibrilgo/fibril/core/wire"
)

// S-79: '*' matches any run (including none), nothing else is special,
// prefix and suffix may not overlap.
func TestStreamPatternMatch(t *testing.T) {
	for _, tc := range []struct {
		p, v string
		want bool
	}{
		{"eu-*", "eu-", true}, {"eu-*", "eu-west", true}, {"eu-*", "us-east", false},
		{"a*c", "ac", true}, {"a*c", "abc", true}, {"a*c", "ab", false},
		{"*", "", true}, {"*", "anything", true},
		{"exact", "exact", true}, {"exact", "exactly", false}, {"", "", true}, {"", "x", false},
		{"aa*aa", "aaa", false}, {"aa*aa", "aaaa", true},
		{"a*b*c", "axxbyyc", true}, {"a*b*c", "axxcyyb", false}, {"*b*", "abc", true}, {"*b*", "ac", false},
		{"a?c", "abc", false}, {"a.c", "abc", false}, {"**", "x", true},
	} {
		if got := matchPattern(tc.p, tc.v); got != tc.want {
			t.Errorf("matchPattern(%q, %q) = %v, want %v", tc.p, tc.v, got, tc.want)
		}
	}
}

func TestStreamFilterIsAnAndOfClauses(t *testing.T) {
	h := wire.Headers{{Key: "region", Value: "eu-west"}, {Key: "kind", Value: "order"}}
	for _, tc := range []struct {
		f    []wire.FilterClause
		want bool
	}{
		{nil, true},
		{[]wire.FilterClause{{Key: "region", Pattern: "eu-*"}}, true},
		{[]wire.FilterClause{{Key: "region", Pattern: "eu-*"}, {Key: "kind", Pattern: "order"}}, true},
		{[]wire.FilterClause{{Key: "region", Pattern: "eu-*"}, {Key: "kind", Pattern: "refund"}}, false},
		{[]wire.FilterClause{{Key: "Region", Pattern: "*"}}, false},  // keys are case-sensitive
		{[]wire.FilterClause{{Key: "missing", Pattern: "*"}}, false}, // a record lacking the header fails
	} {
		if got := matchFilter(tc.f, h); got != tc.want {
			t.Errorf("matchFilter(%v) = %v, want %v", tc.f, got, tc.want)
		}
	}
}
