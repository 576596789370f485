//go:build !unix

package auth

import "testing"

func inode(t *testing.T, _ string) uint64 {
	t.Skip("no inode numbers on this platform")
	return 0
}
