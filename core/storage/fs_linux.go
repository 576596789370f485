//go:build linux

package storage

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// dataSync flushes f with fdatasync(2). That is all the partition needs
// from an fsync of a segment or journal file: fdatasync writes the data
// and every piece of metadata needed to read it back — in particular the
// file size after an append or a truncation, and the block allocation —
// and skips only metadata such as modification times. So a record or
// journal entry covered by it survives a power loss exactly as with
// fsync, and the promises in README.md are unchanged. It saves the inode
// timestamp update in the filesystem journal on every commit.
// (Directory entries are made durable separately, by SyncDir's fsync.)
func dataSync(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	// Control keeps the descriptor from being closed under us.
	if cerr := rc.Control(func(fd uintptr) {
		for {
			serr = syscall.Fdatasync(int(fd))
			if serr != syscall.EINTR {
				return
			}
		}
	}); cerr != nil {
		return cerr
	}
	if serr != nil {
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: serr}
	}
	return nil
}

// startWriteback asks the kernel to start writing f's dirty pages to the
// disk without waiting for them (sync_file_range with
// SYNC_FILE_RANGE_WRITE). It makes nothing durable — metadata and the
// disk's cache are left alone — so a caller still fsyncs; see
// WAL.checkpoint for why starting every file's writeback first pays.
func startWriteback(f File) {
	of, ok := f.(osFile)
	if !ok {
		return // a test filesystem: nothing to start
	}
	rc, err := of.SyscallConn()
	if err != nil {
		return
	}
	// Control keeps the descriptor from being closed under us. An error
	// only means the later fsync does all the work, as without this call.
	_ = rc.Control(func(fd uintptr) {
		_ = unix.SyncFileRange(int(fd), 0, 0, unix.SYNC_FILE_RANGE_WRITE)
	})
}
