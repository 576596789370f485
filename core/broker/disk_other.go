//go:build !unix

package broker

import "errors"

// statFree is not implemented here: the disk guard logs that it cannot
// read the free space, once, and never refuses publishes.
func statFree(string) (uint64, error) {
	return 0, errors.New("free space is not checked on this platform")
}
