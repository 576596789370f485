package config

import (
	"slices"
	"strings"
)

// Near-miss suggestions for unknown keys, flags and environment variables.
// A distance of at most two edits catches the usual typos (a dropped,
// doubled or swapped letter) without suggesting unrelated names.

const maxTypoDistance = 2

// editDistance is the Levenshtein distance between a and b (bytes; names
// are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// nearest returns the candidate closest to name within maxTypoDistance,
// or "" (ties go to the first candidate).
func nearest(name string, candidates []string) string {
	best, bestD := "", maxTypoDistance+1
	for _, c := range candidates {
		if d := editDistance(name, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// keyNames lists every key name (all classes, so that a misspelt runtime
// key still gets its explanation).
func keyNames() []string {
	out := make([]string, len(keys))
	for i := range keys {
		out[i] = keys[i].Name
	}
	return out
}

// suggestKey returns " (did you mean …?)" for an unknown key, trying a
// near miss first and then keys of the same section family that end in the
// same leaf (e.g. "broker.bind" → "broker.listener.bind").
func suggestKey(name string) string {
	if n := nearest(name, keyNames()); n != "" {
		return " (did you mean " + n + "?)"
	}
	top, _, _ := strings.Cut(name, ".")
	leaf := name[strings.LastIndexByte(name, '.')+1:]
	var same []string
	for i := range keys {
		k := &keys[i]
		if k.Leaf() == leaf && strings.HasPrefix(k.Name, top+".") {
			same = append(same, k.Name)
		}
	}
	if len(same) > 0 {
		return " (did you mean " + strings.Join(same, " or ") + "?)"
	}
	return ""
}

// flagNames lists every registered flag name.
func flagNames() []string {
	out := []string{"config"}
	for i := range keys {
		out = append(out, keys[i].FlagNames()...)
	}
	return out
}

// envNames lists every known environment variable, sorted.
func envNames() []string {
	out := []string{EnvConfig}
	for e := range envIndex {
		out = append(out, e)
	}
	slices.Sort(out)
	return out
}
