// Package ncclenv judges a job's NCCL settings against its allocation:
// the environment of each rank (NCCL_*, FI_*, UCX_*, CUDA_VISIBLE_DEVICES,
// NVIDIA_VISIBLE_DEVICES), the devices of every rank where they are known
// (MIG or full GPU, parent GPU, NVLink domain), the rank's network
// interfaces and HCAs where they are known, and the NCCL version where it
// can be told. Settings that turn a valid allocation into an abort or a
// hang at NCCL init are reported before anything runs.
//
// The rules are pure functions of Input. Each face fills in what it knows:
// the validating webhook and `rankgate diagnose` the pod templates alone,
// the controller the templates plus every rank's devices, `rankgate
// launch` and `rankgate preflight --env-file` one rank's environment plus
// the local devices and interfaces. A rule whose facts are unknown stays
// silent, or says what it could not judge; it never guesses.
package ncclenv

import (
	"sort"
	"strings"
)

// Env is one environment as far as it is known: a container's env of a pod
// template, a process's own environment, or an env file.
type Env struct {
	// Vars are the variables whose values are known.
	Vars map[string]string
	// Unresolved names variables that are set from a source that cannot be
	// read here (valueFrom, an envFrom ConfigMap, a $(VAR) reference): they
	// are judged neither set nor unset.
	Unresolved map[string]bool
	// Partial says that variables not named here may still be set (a
	// container's envFrom): a variable absent from Vars is then unknown,
	// not unset.
	Partial bool
}

// NewEnv builds an Env from known values.
func NewEnv(vars map[string]string) *Env {
	e := &Env{Vars: map[string]string{}, Unresolved: map[string]bool{}}
	for k, v := range vars {
		e.Vars[k] = v
	}
	return e
}

// FromEnviron builds an Env from KEY=VALUE strings (os.Environ); a later
// entry of a name replaces an earlier one, as getenv sees it.
func FromEnviron(environ []string) *Env {
	e := NewEnv(nil)
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue
		}
		e.Vars[k] = v
	}
	return e
}

// Set records a known value (nil-safe maps).
func (e *Env) Set(name, value string) {
	if e.Vars == nil {
		e.Vars = map[string]string{}
	}
	e.Vars[name] = value
	delete(e.Unresolved, name)
}

// SetUnresolved records a variable whose value cannot be read.
func (e *Env) SetUnresolved(name string) {
	if e.Unresolved == nil {
		e.Unresolved = map[string]bool{}
	}
	delete(e.Vars, name)
	e.Unresolved[name] = true
}

// value is the variable's state: its value, whether it is set to a
// non-empty value, and whether its value is known at all.
func (e *Env) value(name string) (v string, set, known bool) {
	if e == nil {
		return "", false, false
	}
	if e.Unresolved[name] {
		return "", true, false
	}
	v, ok := e.Vars[name]
	if !ok && e.Partial {
		return "", false, false
	}
	return v, ok && v != "", true
}

// Int reads an integer NCCL parameter the way NCCL does (ncclLoadParam:
// strtoll with base 0, an empty value is the default): "1", "0x1" and
// "1abc" are 1; "true" and "yes" have no digits and read as 0; a value
// out of range takes the default. known is false for an unresolved
// variable; set is false when NCCL takes its default.
func (e *Env) Int(name string) (v int64, set, known bool) {
	s, set, known := e.value(name)
	if !set || !known {
		return 0, false, known
	}
	n, ok := strtoll(s)
	if !ok {
		return 0, false, true
	}
	return n, true, true
}

// IsOne reports whether NCCL reads name as exactly 1 (forced on; for
// *_DISABLE, disabled).
func (e *Env) IsOne(name string) bool {
	v, set, known := e.Int(name)
	return known && set && v == 1
}

// String reads a string parameter: set is false for an empty or unset
// variable; known is false for an unresolved one.
func (e *Env) String(name string) (v string, set, known bool) {
	return e.value(name)
}

// Tuning lists the known NCCL_*, FI_* and UCX_* variables (sorted), the
// settings every rank of a job must agree on.
func (e *Env) Tuning() []string {
	if e == nil {
		return nil
	}
	var out []string
	for k := range e.Vars {
		if tuningVar(k) {
			out = append(out, k)
		}
	}
	for k := range e.Unresolved {
		if tuningVar(k) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func tuningVar(k string) bool {
	return strings.HasPrefix(k, "NCCL_") || strings.HasPrefix(k, "FI_") || strings.HasPrefix(k, "UCX_")
}

// strtoll parses s as C's strtoll(s, NULL, 0) does: leading white space,
// an optional sign, a 0x (hex) or 0 (octal) prefix, then the longest run
// of digits; no digits is 0. ok is false when the value is out of range
// (errno ERANGE: NCCL then keeps its default).
func strtoll(s string) (int64, bool) {
	i := 0
	for i < len(s) && (s[i] == ' ' || (s[i] >= '\t' && s[i] <= '\r')) {
		i++
	}
	neg := false
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		neg = s[i] == '-'
		i++
	}
	base := uint64(10)
	switch {
	case i+2 < len(s) && s[i] == '0' && (s[i+1] == 'x' || s[i+1] == 'X') && digit(s[i+2], 16) >= 0:
		base, i = 16, i+2
	case i < len(s) && s[i] == '0':
		base = 8
	}
	const limit = uint64(1) << 63
	var n uint64
	overflow := false
	for ; i < len(s); i++ {
		d := digit(s[i], base)
		if d < 0 {
			break
		}
		if n > (limit-uint64(d))/base {
			overflow = true
			continue
		}
		n = n*base + uint64(d)
	}
	if overflow || (!neg && n == limit) {
		return 0, false
	}
	if neg {
		return -int64(n), true
	}
	return int64(n), true
}

func digit(c byte, base uint64) int {
	var d int
	switch {
	case c >= '0' && c <= '9':
		d = int(c - '0')
	case c >= 'a' && c <= 'z':
		d = int(c-'a') + 10
	case c >= 'A' && c <= 'Z':
		d = int(c-'A') + 10
	default:
		return -1
	}
	if uint64(d) >= base {
		return -1
	}
	return d
}

// With is e with o laid over it: o's known values and unresolved names
// replace e's (a launcher's exports over a container's env). e is not
// changed; a nil o gives e.
func (e *Env) With(o *Env) *Env {
	if o == nil {
		return e
	}
	out := NewEnv(nil)
	if e != nil {
		for k, v := range e.Vars {
			out.Vars[k] = v
		}
		for k := range e.Unresolved {
			out.Unresolved[k] = true
		}
		out.Partial = e.Partial
	}
	for k, v := range o.Vars {
		out.Set(k, v)
	}
	for k := range o.Unresolved {
		out.SetUnresolved(k)
	}
	return out
}
