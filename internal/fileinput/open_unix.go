//go:build unix

package fileinput

import (
	"os"
	"syscall"
)

// openNoWait opens path for reading without waiting for a writer when it
// is (now) a named pipe; for regular files O_NONBLOCK changes nothing.
func openNoWait(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}
