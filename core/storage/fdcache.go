package storage

import (
	"os"
	"sync"
)

// Open files of sealed segments.
//
// A partition keeps its active segment and its journal open for its whole
// life. A sealed segment is only read (consumers behind the tail, recovery
// of unsettled records), so its file is opened on demand and kept in a
// small process-wide cache of at most maxOpenSealed descriptors shared by
// every partition: thousands of idle queues with long backlogs then cost
// two descriptors each plus the cache, not one per segment.
//
// A segment's read handle is s.h (nil while closed). Readers use it only
// while holding s.ioMu for reading (Read and Scan take it under
// Partition.mu, before they let go of the segment), and open it lazily
// under s.openMu when it is nil. Whoever closes the handle — eviction,
// retention deleting the segment, Close — holds s.ioMu for writing, so
// never while a reader is inside. Eviction only uses TryLock: a segment in
// use is skipped, and the cache never blocks on a reader (it may exceed
// its bound while more than maxOpenSealed sealed segments are being read
// at the same instant).
//
// Eviction is a CLOCK sweep (second chance): a read marks the segment
// used; the sweep clears marks and closes the first unmarked, unused one.

// defaultMaxOpenSealed is the process-wide bound on open sealed segments.
const defaultMaxOpenSealed = 256

// fileHandle boxes a File for atomic.Pointer.
type fileHandle struct{ f File }

type fdCache struct {
	mu   sync.Mutex
	max  int
	ring []*segment // open sealed segments; s.slot is s's index
	hand int
}

var sealedFDs = fdCache{max: defaultMaxOpenSealed}

// add registers s, sealed and with its handle open, and closes the least
// recently used unused handles beyond the bound.
func (c *fdCache) add(s *segment) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.slot >= 0 {
		return
	}
	s.slot = len(c.ring)
	c.ring = append(c.ring, s)
	c.evictLocked()
}

func (c *fdCache) evictLocked() {
	for tries := 2 * len(c.ring); len(c.ring) > c.max && tries > 0; tries-- {
		if c.hand >= len(c.ring) {
			c.hand = 0
		}
		v := c.ring[c.hand]
		if v.used.Swap(false) || !v.ioMu.TryLock() {
			c.hand++
			continue
		}
		if h := v.h.Swap(nil); h != nil {
			h.f.Close() // read-only use: nothing to lose
		}
		c.removeLocked(v)
		v.ioMu.Unlock()
	}
}

// remove unregisters s (its handle is being closed by the caller, who
// holds s.ioMu for writing).
func (c *fdCache) remove(s *segment) {
	c.mu.Lock()
	c.removeLocked(s)
	c.mu.Unlock()
}

func (c *fdCache) removeLocked(s *segment) {
	i := s.slot
	if i < 0 {
		return
	}
	last := len(c.ring) - 1
	c.ring[i] = c.ring[last]
	c.ring[i].slot = i
	c.ring[last] = nil
	c.ring = c.ring[:last]
	s.slot = -1
}

func (c *fdCache) setMax(n int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.max
	c.max = n
	c.evictLocked()
	return old
}

func (c *fdCache) open() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ring)
}

// readFile returns the file to read s through, opening it if it was closed.
// Caller holds s.ioMu for reading and must not use the file after
// releasing it.
func (s *segment) readFile(fsys FS) (File, error) {
	if h := s.h.Load(); h != nil {
		if !s.used.Load() {
			s.used.Store(true)
		}
		return h.f, nil
	}
	s.openMu.Lock()
	defer s.openMu.Unlock()
	if h := s.h.Load(); h != nil {
		return h.f, nil
	}
	f, err := fsys.OpenFile(s.path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	s.h.Store(&fileHandle{f})
	s.used.Store(true)
	sealedFDs.add(s)
	return f, nil
}

// seal hands the open file of a segment that stops being active (a roll,
// or recovery of an older segment) to the cache, which may close it.
func (s *segment) seal() {
	s.f = nil
	sealedFDs.add(s)
}

// closeFile closes s's file for good (retention, Close, failed open).
// The caller must not hold s.ioMu; it waits for readers.
func (s *segment) closeFile() error {
	s.ioMu.Lock()
	defer s.ioMu.Unlock()
	sealedFDs.remove(s)
	s.f = nil
	if h := s.h.Swap(nil); h != nil {
		return h.f.Close()
	}
	return nil
}

// setFile makes f the segment's file: written by the writer role (s.f,
// active segment) and read through s.h.
func (s *segment) setFile(f File) {
	s.f = f
	s.h.Store(&fileHandle{f})
}
