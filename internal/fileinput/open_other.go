//go:build !unix

package fileinput

import "os"

func openNoWait(path string) (*os.File, error) { return os.Open(path) }
