//go:build linux

package launcher

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// sysProcAttr puts CMD in its own process group and kills it if rankgate
// dies without a chance to clean up (SIGKILL, OOM kill).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

const (
	fSetPipeSz = 1031 // F_SETPIPE_SZ
	fGetPipeSz = 1032 // F_GETPIPE_SZ
)

const prSetChildSubreaper = 36 // PR_SET_CHILD_SUBREAPER

// becomeSubreaper makes orphaned descendants (a grandchild whose parent
// died, a daemon that double-forked out of the process group) children of
// rankgate instead of init, so that rankgate can find and end them.
func becomeSubreaper() error {
	_, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// procInfo is one line of /proc/<pid>/stat, the fields rankgate needs.
type procInfo struct {
	pid, ppid, pgrp int
	state           byte
}

// listProcs reads every process's pid, parent, group and state.
func listProcs() []procInfo {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	out := make([]procInfo, 0, len(names))
	buf := make([]byte, 512)
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		if p, ok := readStat(pid, buf); ok {
			out = append(out, p)
		}
	}
	return out
}

func readStat(pid int, buf []byte) (procInfo, bool) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procInfo{}, false
	}
	n, _ := f.Read(buf)
	f.Close()
	b := buf[:n]
	// "pid (comm) S ppid pgrp ...": comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return procInfo{}, false
	}
	fields := bytes.Fields(b[i+2:])
	if len(fields) < 3 || len(fields[0]) != 1 {
		return procInfo{}, false
	}
	ppid, err1 := strconv.Atoi(string(fields[1]))
	pgrp, err2 := strconv.Atoi(string(fields[2]))
	if err1 != nil || err2 != nil {
		return procInfo{}, false
	}
	return procInfo{pid: pid, ppid: ppid, pgrp: pgrp, state: fields[0][0]}, true
}

// groupHasLive reports whether a process group has a member that is not a
// zombie. kill(-pgid, 0) alone counts zombies, which linger until their
// new parent reaps them.
func groupHasLive(pgid int) bool {
	if err := syscall.Kill(-pgid, 0); err == syscall.ESRCH {
		return false
	}
	for _, p := range listProcs() {
		if p.pgrp == pgid && p.state != 'Z' && p.state != 'X' {
			return true
		}
	}
	return false
}

// descendants lists the live processes below root.
func descendants(root int) []procInfo {
	procs := listProcs()
	children := map[int][]int{}
	byPid := map[int]procInfo{}
	for _, p := range procs {
		children[p.ppid] = append(children[p.ppid], p.pid)
		byPid[p.pid] = p
	}
	var out []procInfo
	queue := append([]int(nil), children[root]...)
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		if p := byPid[pid]; p.state != 'Z' && p.state != 'X' {
			out = append(out, p)
		}
		queue = append(queue, children[pid]...)
	}
	return out
}

// reapAdopted reaps the zombie children of this process other than skip
// (CMD itself, which exec.Cmd waits for).
func reapAdopted(skip int) {
	self := os.Getpid()
	for _, p := range listProcs() {
		if p.ppid == self && p.pid != skip && p.state == 'Z' {
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(p.pid, &ws, syscall.WNOHANG, nil)
		}
	}
}
