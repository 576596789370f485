// Package docs holds no code. Its test keeps the repository's citations
// honest: every rule id S-n cited anywhere must have an entry in
// semantics.md, every cited <file>.md#anchor must exist, and Go files must
// cite documents in the repository (or say the reason) rather than
// documents outside it.
package docs
