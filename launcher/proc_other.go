//go:build unix && !linux

package launcher

import (
	"errors"
	"os"
	"syscall"
)

func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func growPipe(*os.File, int) {}

func becomeSubreaper() error { return errors.New("child subreaper needs Linux") }

type procInfo struct {
	pid, ppid, pgrp int
	state           byte
}

func groupHasLive(pgid int) bool { return syscall.Kill(-pgid, 0) != syscall.ESRCH }

func descendants(int) []procInfo { return nil }

func reapAdopted(int) {}

const procSupported = false
