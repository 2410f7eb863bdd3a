//go:build linux && cgo

package nvmlsource

import (
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// What NVML answers, read the same way by every discovery step: C strings
// from fixed-size buffers, and calls whose NOT_SUPPORTED means "unknown".

// cstr reads a NUL-terminated C string from NVML's fixed-size buffers.
func cstr(b []int8) string {
	n := 0
	for n < len(b) && b[n] != 0 {
		n++
	}
	var sb strings.Builder
	sb.Grow(n)
	for _, c := range b[:n] {
		sb.WriteByte(byte(c))
	}
	return sb.String()
}

// get0, get02, get1 and get2 call and then apply answer: ok is false when
// the driver cannot tell (the result is then the zero value).

func get0[A any](c *caller, o op, f func() (A, nvml.Return)) (A, bool, error) {
	a, r, err := call0(c, o, f)
	if err != nil {
		return a, false, err
	}
	ok, err := answer(o, r)
	if !ok {
		var zero A
		return zero, false, err
	}
	return a, true, nil
}

func get02[A, B any](c *caller, o op, f func() (A, B, nvml.Return)) (A, B, bool, error) {
	var a A
	var b B
	var r nvml.Return
	if err := c.do(o, c.timeout, func() { a, b, r = f() }); err != nil {
		var za A
		var zb B
		return za, zb, false, err
	}
	ok, err := answer(o, r)
	if !ok {
		var za A
		var zb B
		return za, zb, false, err
	}
	return a, b, true, nil
}

func get1[X, A any](c *caller, o op, f func(X) (A, nvml.Return), x X) (A, bool, error) {
	return get0(c, o, func() (A, nvml.Return) { return f(x) })
}

func get2[X, Y, A any](c *caller, o op, f func(X, Y) (A, nvml.Return), x X, y Y) (A, bool, error) {
	return get0(c, o, func() (A, nvml.Return) { return f(x, y) })
}
