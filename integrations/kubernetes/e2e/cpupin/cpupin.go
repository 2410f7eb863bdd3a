// Package cpupin runs benchmark processes on CPUs of their own, by role
// (kube-apiserver, etcd, the controller, the rank clients), and reads back
// where a process may run, so that a benchmark can prove its pinning before
// it measures anything.
//
// Pinning is done by starting a process under taskset (util-linux): the
// affinity is set before the program's first instruction, so every thread
// it starts inherits it, unlike pinning a running multi-threaded process
// after the fact. CPU lists are written as Linux writes them (taskset -c,
// /proc/PID/status Cpus_allowed_list, cpuset.cpus): "0-7", "8,10-11".
package cpupin

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// MaxCPU bounds the CPU numbers a list may name: Linux's largest
// configurable NR_CPUS. It keeps a mistyped "0-999999999" from allocating.
const MaxCPU = 8191

// ParseList parses a CPU list ("0-7,10,12-13") into its CPUs, sorted and
// without repeats. Empty and malformed lists are errors.
func ParseList(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, errors.New("cpupin: empty CPU list")
	}
	var cpus []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := parseCPU(lo)
		if err != nil {
			return nil, fmt.Errorf("cpupin: CPU list %q: %w", s, err)
		}
		last := first
		if isRange {
			if last, err = parseCPU(hi); err != nil {
				return nil, fmt.Errorf("cpupin: CPU list %q: %w", s, err)
			}
			if last < first {
				return nil, fmt.Errorf("cpupin: CPU list %q: range %q runs backwards", s, part)
			}
		}
		for c := first; c <= last; c++ {
			cpus = append(cpus, c)
		}
	}
	slices.Sort(cpus)
	return slices.Compact(cpus), nil
}

func parseCPU(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || strings.HasPrefix(s, "+") {
		return 0, fmt.Errorf("%q is not a CPU number", s)
	}
	if n > MaxCPU {
		return 0, fmt.Errorf("CPU %d is above %d", n, MaxCPU)
	}
	return n, nil
}

// FormatList writes sorted, distinct CPUs as a list with ranges, as Linux
// does ("0-3,8").
func FormatList(cpus []int) string {
	var b strings.Builder
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(cpus[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(cpus[j]))
		}
		i = j + 1
	}
	return b.String()
}

// Command is exec.Command(name, args...) started under `taskset -c list`
// when list is not empty, and plain otherwise.
func Command(list, name string, args ...string) (*exec.Cmd, error) {
	if list == "" {
		return exec.Command(name, args...), nil
	}
	if _, err := ParseList(list); err != nil {
		return nil, err
	}
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		return nil, fmt.Errorf("cpupin: pinning %s to CPUs %s needs taskset (util-linux): %w", filepath.Base(name), list, err)
	}
	return exec.Command(taskset, append([]string{"-c", list, name}, args...)...), nil
}

// Allowed returns the CPUs process pid may run on (its Cpus_allowed_list).
func Allowed(pid int) ([]int, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, fmt.Errorf("cpupin: reading the affinity of pid %d: %w", pid, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Cpus_allowed_list:"); ok {
			cpus, err := ParseList(v)
			if err != nil {
				return nil, fmt.Errorf("cpupin: pid %d: %w", pid, err)
			}
			return cpus, nil
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("cpupin: reading the affinity of pid %d: %w", pid, err)
	}
	return nil, fmt.Errorf("cpupin: /proc/%d/status has no Cpus_allowed_list", pid)
}

// Check returns an error unless process pid may run on exactly the CPUs
// of list.
func Check(pid int, list string) error {
	want, err := ParseList(list)
	if err != nil {
		return err
	}
	got, err := Allowed(pid)
	if err != nil {
		return err
	}
	if !slices.Equal(got, want) {
		return fmt.Errorf("cpupin: pid %d may run on CPUs %s, not %s as asked", pid, FormatList(got), FormatList(want))
	}
	return nil
}

// Children returns the processes whose parent is ppid, by command name
// (/proc/PID/comm, at most 15 characters): the control plane a test
// process started, say.
func Children(ppid int) (map[string][]int, error) {
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		return nil, fmt.Errorf("cpupin: listing processes: %w", err)
	}
	out := map[string][]int{}
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // the process exited meanwhile
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		f := strings.Fields(s[end+1:])
		if len(f) < 2 || f[1] != strconv.Itoa(ppid) {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(s[:open]))
		if err != nil {
			continue
		}
		comm := s[open+1 : end]
		out[comm] = append(out[comm], pid)
	}
	return out, nil
}
