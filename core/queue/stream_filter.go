package queue

import (
	"strings"

	"github.com/fibrilgo/fibril/core/wire"
)

// matchFilter applies a stream subscription's filter (S-79): every clause
// must find a header named exactly Key whose value matches Pattern. An
// empty filter matches every record.
func matchFilter(filter []wire.FilterClause, h wire.Headers) bool {
	for _, c := range filter {
		ok := false
		for _, e := range h {
			if e.Key == c.Key && matchPattern(c.Pattern, e.Value) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// matchPattern reports whether v matches p, where each '*' in p matches
// any run of characters (including none) and every other character
// matches itself (S-79). The text before the first '*' must be a prefix
// of v, the text after the last '*' a suffix that does not overlap it,
// and the pieces in between must appear in order in what lies between.
func matchPattern(p, v string) bool {
	pieces := strings.Split(p, "*")
	if len(pieces) == 1 {
		return p == v
	}
	head, tail := pieces[0], pieces[len(pieces)-1]
	if len(head)+len(tail) > len(v) || !strings.HasPrefix(v, head) || !strings.HasSuffix(v, tail) {
		return false
	}
	mid := v[len(head) : len(v)-len(tail)]
	for _, piece := range pieces[1 : len(pieces)-1] {
		i := strings.Index(mid, piece)
		if i < 0 {
			return false
		}
		mid = mid[i+len(piece):]
	}
	return true
}
