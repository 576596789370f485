//go:build !linux

package storage

import "os"

// dataSync is a plain fsync where fdatasync is not used (see fs_linux.go).
func dataSync(f *os.File) error { return f.Sync() }
