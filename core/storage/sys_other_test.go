//go:build !linux

package storage_test

import (
	"os"
	"time"
)

func cpuTimes() (user, sys time.Duration) { return 0, 0 }

func rawDataSync(f *os.File) error { return f.Sync() }
