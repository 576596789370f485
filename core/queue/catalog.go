package queue

import (
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/storage"
	"github.com/fibrilgo/fibril/core/wire"
)

// The catalog is the list of declared queues and streams with their
// specs: the one piece of engine metadata that is not per partition. It is
// small and changes only on declare/auto-create, so it is one JSON file
// rewritten whole, crash-safely (temp file, fsync, rename, directory
// fsync), through the storage FS seam so that the power-loss tests cover
// it too.
//
// Layout under Options.Dir:
//
//	catalog.json                      the catalog
//	q/<topic>/<group or @default>/<n>/  one storage partition per directory
//
// "@default" (the absent group) cannot collide with a group name: S-16
// names never contain '@'.

const (
	catalogName    = "catalog.json"
	catalogTmpName = catalogName + ".tmp" // storage.ReplaceFile's temporary
	catalogVersion = 1
)

type catalogFile struct {
	Version int             `json:"version"`
	Queues  []catalogQueue  `json:"queues"`
	Streams []catalogStream `json:"streams"`
	// Deleted keeps the kind of every deleted topic that has not been
	// declared again: it may only come back as the same kind (S-22). An
	// older broker ignores the field (and so forgets that rule).
	Deleted []catalogDeleted `json:"deleted,omitempty"`
}

type catalogDeleted struct {
	Topic string `json:"topic"`
	Kind  string `json:"kind"` // queue | stream
}

type catalogQueue struct {
	Topic            string      `json:"topic"`
	Group            *string     `json:"group,omitempty"`
	Partitions       uint32      `json:"partitions"`
	DLQ              *catalogDLQ `json:"dlq,omitempty"`
	MaxRetries       uint32      `json:"max_retries"`
	DefaultTTLMillis *uint64     `json:"default_ttl_ms,omitempty"`
	// PartitioningVersion is 0 until a repartition (docs/protocol.md#topology).
	PartitioningVersion uint64 `json:"partitioning_version,omitempty"`
}

type catalogDLQ struct {
	Kind  string  `json:"kind"` // discard | global | named
	Topic string  `json:"topic,omitempty"`
	Group *string `json:"group,omitempty"`
}

type catalogStream struct {
	Topic             string  `json:"topic"`
	Partitions        uint32  `json:"partitions"`
	RequestedCount    *uint32 `json:"requested_partitions,omitempty"`
	Durability        uint8   `json:"durability"`
	MaxAgeMillis      *uint64 `json:"max_age_ms,omitempty"`
	MaxBytes          *uint64 `json:"max_bytes,omitempty"`
	MaxRecords        *uint64 `json:"max_records,omitempty"`
	ReplicationFactor *uint32 `json:"replication_factor,omitempty"`
}

func optPtr[T any](o wire.Option[T]) *T {
	if !o.Present {
		return nil
	}
	v := o.Value
	return &v
}

func ptrOpt[T any](p *T) wire.Option[T] {
	if p == nil {
		return wire.Option[T]{}
	}
	return wire.Some(*p)
}

var dlqKindNames = map[wire.DLQKind]string{wire.DLQDiscard: "discard", wire.DLQBrokerDLQ: "global", wire.DLQNamed: "named"}

func toCatalogQueue(info QueueInfo) catalogQueue {
	c := catalogQueue{
		Topic:            info.Topic,
		Group:            optPtr(info.Group),
		Partitions:       info.PartitionCount,
		MaxRetries:       info.MaxRetries,
		DefaultTTLMillis: optPtr(info.DefaultTTLMillis),

		PartitioningVersion: info.PartitioningVersion,
	}
	if d, ok := info.DLQ.Get(); ok {
		c.DLQ = &catalogDLQ{Kind: dlqKindNames[d.Kind]}
		if d.Kind == wire.DLQNamed {
			c.DLQ.Topic, c.DLQ.Group = d.Topic, optPtr(d.Group)
		}
	}
	return c
}

func fromCatalogQueue(c catalogQueue) (QueueInfo, error) {
	info := QueueInfo{
		Key:              Key{Topic: c.Topic, Group: ptrOpt(c.Group)},
		PartitionCount:   c.Partitions,
		MaxRetries:       c.MaxRetries,
		DefaultTTLMillis: ptrOpt(c.DefaultTTLMillis),

		PartitioningVersion: c.PartitioningVersion,
	}
	if err := checkKey(info.Key); err != nil || c.Partitions == 0 {
		return info, errors.New("bad queue entry " + strconv.Quote(info.Key.String()))
	}
	if c.DLQ != nil {
		var d wire.DLQPolicy
		found := false
		for k, name := range dlqKindNames {
			if name == c.DLQ.Kind {
				d.Kind, found = k, true
			}
		}
		if !found {
			return info, errors.New("unknown dlq kind " + strconv.Quote(c.DLQ.Kind))
		}
		if d.Kind == wire.DLQNamed {
			d.Topic, d.Group = c.DLQ.Topic, ptrOpt(c.DLQ.Group)
		}
		info.DLQ = wire.Some(d)
	}
	return info, nil
}

func toCatalogStream(s StreamInfo) catalogStream {
	return catalogStream{
		Topic:             s.Topic,
		Partitions:        s.PartitionCount,
		RequestedCount:    optPtr(s.StreamSpec.PartitionCount),
		Durability:        uint8(s.Durability),
		MaxAgeMillis:      optPtr(s.Retention.MaxAgeMillis),
		MaxBytes:          optPtr(s.Retention.MaxBytes),
		MaxRecords:        optPtr(s.Retention.MaxRecords),
		ReplicationFactor: optPtr(s.ReplicationFactor),
	}
}

func fromCatalogStream(c catalogStream) StreamInfo {
	return StreamInfo{
		StreamSpec: StreamSpec{
			Topic:          c.Topic,
			PartitionCount: ptrOpt(c.RequestedCount),
			Durability:     wire.Durability(c.Durability),
			Retention: wire.StreamRetention{
				MaxAgeMillis: ptrOpt(c.MaxAgeMillis),
				MaxBytes:     ptrOpt(c.MaxBytes),
				MaxRecords:   ptrOpt(c.MaxRecords),
			},
			ReplicationFactor: ptrOpt(c.ReplicationFactor),
		},
		PartitionCount: c.Partitions,
	}
}

// readCatalog loads the catalog; a missing file is an empty catalog. A
// leftover temp file (a crash mid-write) is removed: the rename never
// happened, so the old catalog is the truth.
func readCatalog(fsys storage.FS, dir string) (catalogFile, error) {
	var c catalogFile
	_ = fsys.Remove(filepath.Join(dir, catalogTmpName))
	f, err := fsys.OpenFile(filepath.Join(dir, catalogName), os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, err
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return c, err
	}
	buf := make([]byte, size)
	if _, err := f.ReadAt(buf, 0); err != nil && !(errors.Is(err, io.EOF) && size == 0) {
		return c, err
	}
	if err := json.Unmarshal(buf, &c); err != nil {
		return c, err
	}
	if c.Version != catalogVersion {
		return c, errors.New("unsupported catalog version " + strconv.Itoa(c.Version))
	}
	return c, nil
}

// writeCatalog replaces the catalog crash-safely: after a power loss at
// any point the directory holds either the old or the new catalog whole.
func writeCatalog(fsys storage.FS, dir string, c catalogFile) error {
	c.Version = catalogVersion
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return storage.ReplaceFile(fsys, dir, catalogName, data)
}

// partitionDir is where partition n of queue k keeps its storage.
func partitionDir(root string, k Key, n uint32) string {
	g := "@default"
	if name, ok := k.Group.Get(); ok {
		g = name
	}
	return filepath.Join(root, "q", k.Topic, g, strconv.FormatUint(uint64(n), 10))
}

// makePartitionDirs creates the directories of a new queue and makes
// their entries durable (fsync of every parent up to the root) before the
// catalog names the queue: storage fsyncs the files it creates inside a
// partition directory, not the directory's own entry in its parent.
func makePartitionDirs(fsys storage.FS, root string, k Key, count uint32) error {
	for n := range count {
		if err := fsys.MkdirAll(partitionDir(root, k, n), 0o755); err != nil {
			return err
		}
	}
	return syncParents(fsys, root, partitionDir(root, k, 0))
}

// Name rules (S-16): 1–128 bytes of [a-z0-9._-], no leading or trailing
// '.', no "..". They also keep every name safe as a directory name.
func checkName(what, s string) error {
	if len(s) == 0 || len(s) > 128 {
		return core.Errorf(core.ErrBadRequest, "%s name %q must be 1-128 bytes long", what, s)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return core.Errorf(core.ErrBadRequest, "%s name %q may contain only a-z, 0-9, '.', '_', '-' (byte %d is %q)", what, s, i, c)
		}
		if c == '.' && (i == 0 || i == len(s)-1 || s[i-1] == '.') {
			return core.Errorf(core.ErrBadRequest, "%s name %q must not start or end with '.' nor contain '..'", what, s)
		}
	}
	return nil
}

func checkKey(k Key) error {
	if err := checkName("topic", k.Topic); err != nil {
		return err
	}
	if g, ok := k.Group.Get(); ok {
		return checkName("group", g)
	}
	return nil
}
