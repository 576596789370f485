//go:build !linux

package storage_test

import (
	"os"
	"time"
)

func cpuTime() time.Duration { return 0 } // not measured here

func cpuTimes() (user, sys time.Duration) { return 0, 0 }

func rawDataSync(f *os.File) error { return f.Sync() }
