//go:build unix

package broker

import "syscall"

// statFree is the space statfs(2) says an unprivileged writer may use.
func statFree(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return uint64(st.Bavail) * uint64(st.Bsize), nil
}
