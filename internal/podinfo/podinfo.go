// Package podinfo reads a pod's own annotations from a Kubernetes downward
// API volume (fieldRef metadata.annotations), which the kubelet rewrites
// when they change: how an init container with no API access learns that an
// operator annotated its pod.
package podinfo

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/rankgate/rankgate/internal/fileinput"
)

// MaxBytes bounds the file: the API server caps a pod's annotations at
// 256 KiB, and quoting can at most quadruple a byte.
const MaxBytes = 1 << 20

// Parse reads the kubelet's format: one `key="value"` line per annotation,
// the value a Go-quoted string. A line it cannot read is an error naming
// it; an empty input is no annotations.
func Parse(data []byte) (map[string]string, error) {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), MaxBytes)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		key, quoted, ok := strings.Cut(line, "=")
		if !ok || key == "" {
			return nil, fmt.Errorf("line %d: want key=\"value\"", n)
		}
		v, err := strconv.Unquote(quoted)
		if err != nil {
			return nil, fmt.Errorf("line %d: annotation %.64q: value is not a quoted string", n, key)
		}
		out[key] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading annotations: %w", err)
	}
	return out, nil
}

// Read reads and parses the annotations file at path.
func Read(ctx context.Context, path string) (map[string]string, error) {
	b, err := fileinput.ReadFile(ctx, path, nil, MaxBytes)
	if err != nil {
		return nil, err
	}
	m, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// Watch reads path every interval until ctx ends and returns the first
// non-blank value of annotation key it sees ("" when ctx ended first).
// Errors reading the file are passed to onErr (nil: ignored) and the watch
// goes on: the kubelet swaps the file atomically, but a missing volume or
// a damaged file must not end the wait it guards.
func Watch(ctx context.Context, path, key string, interval time.Duration, onErr func(error)) string {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		m, err := Read(ctx, path)
		if err == nil {
			if v := strings.TrimSpace(m[key]); v != "" {
				return v
			}
		} else if onErr != nil && ctx.Err() == nil {
			onErr(err)
		}
		select {
		case <-ctx.Done():
			return ""
		case <-t.C:
		}
	}
}
