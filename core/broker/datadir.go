package broker

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/fibrilgo/fibril/core/buildinfo"
	"github.com/fibrilgo/fibril/core/storage"
)

// The data directory's format (docs/deploy.md#upgrades): one number for
// the layout of everything in server.data_dir, kept in dataFormatFile. The
// parts carry versions of their own too (partition logs, the WAL, the
// queue catalog, the user store, raft's snapshots); this one says which
// combination a directory holds, so a broker can refuse a directory
// written by a newer build before it reads anything, and bring an older
// one up to date, one step at a time, before it serves.
const (
	dataFormat     = 1
	dataFormatFile = "FORMAT.json"
)

// formatUpgrades[n] brings a directory from format n to n+1. Each step is
// idempotent: the marker is written after it, so a crash in between runs
// it again.
var formatUpgrades = map[int]func(dir string, log *slog.Logger) error{
	// Format 0: a directory written before the marker existed, with the
	// layout format 1 names; only the marker is missing.
	0: func(string, *slog.Logger) error { return nil },
}

type dataFormatRecord struct {
	Format    int    `json:"format"`
	WrittenBy string `json:"written_by"` // the build that last wrote the marker
}

// checkDataFormat reads dir's format: it writes the marker in a new
// directory, upgrades an older one in place, and refuses a newer one.
func checkDataFormat(dir string, log *slog.Logger) error {
	path := filepath.Join(dir, dataFormatFile)
	cur, err := readDataFormat(dir)
	if err != nil {
		return fmt.Errorf("server.data_dir %s: %s: %w", dir, dataFormatFile, err)
	}
	if cur > dataFormat {
		var rec dataFormatRecord
		b, _ := os.ReadFile(path)
		_ = json.Unmarshal(b, &rec)
		return fmt.Errorf("server.data_dir %s holds data format %d, written by fibril %s; this build (%s) reads formats up to %d: run that build or a newer one (a directory is never converted back)",
			dir, cur, rec.WrittenBy, buildinfo.Get().Short(), dataFormat)
	}
	for f := cur; f < dataFormat; f++ {
		step := formatUpgrades[f]
		if step == nil {
			return fmt.Errorf("server.data_dir %s: no upgrade from data format %d", dir, f)
		}
		if err := step(dir, log); err != nil {
			return fmt.Errorf("server.data_dir %s: upgrading data format %d to %d: %w", dir, f, f+1, err)
		}
		if err := writeDataFormat(path, f+1); err != nil {
			return err
		}
		log.Info("data directory upgraded", "dir", dir, "from_format", f, "to_format", f+1)
	}
	return nil
}

// readDataFormat returns the directory's format: the marker's, or for a
// directory without one, 0 when it holds data (written before markers)
// and dataFormat when it is new (nothing to convert).
func readDataFormat(dir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dir, dataFormatFile))
	if errors.Is(err, fs.ErrNotExist) {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return 0, err
		}
		if len(entries) == 0 {
			return dataFormat, writeDataFormat(filepath.Join(dir, dataFormatFile), dataFormat)
		}
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var rec dataFormatRecord
	if err := json.Unmarshal(b, &rec); err != nil || rec.Format <= 0 {
		return 0, fmt.Errorf("unreadable (%v): restore it from a backup, or write {\"format\": %d} if this directory was written by this build", err, dataFormat)
	}
	return rec.Format, nil
}

// writeDataFormat writes the marker crash-safely (storage.ReplaceFile).
func writeDataFormat(path string, format int) error {
	b, _ := json.Marshal(dataFormatRecord{Format: format, WrittenBy: buildinfo.Get().Short()})
	return storage.ReplaceFile(storage.OSFS{}, filepath.Dir(path), filepath.Base(path), append(b, '\n'))
}
