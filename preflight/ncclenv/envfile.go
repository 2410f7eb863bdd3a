package ncclenv

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"
)

// MaxEnvFile bounds an env file: settings files are a few kilobytes.
const MaxEnvFile = 1 << 20

// ParseEnvFile reads settings written as a shell, docker --env-file or
// nccl.conf file writes them: KEY=VALUE lines, an optional "export "
// prefix, blank lines and # comments; a value in matching single or
// double quotes loses them. A bare KEY (docker's "take it from my
// environment") is recorded as unresolved. A line that is none of these
// is an error naming it.
func ParseEnvFile(data []byte) (*Env, error) {
	if len(data) > MaxEnvFile {
		return nil, fmt.Errorf("env file of %d bytes: more than %d", len(data), MaxEnvFile)
	}
	e := NewEnv(nil)
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), MaxEnvFile)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if rest, ok := strings.CutPrefix(line, "export"); ok && rest != "" && (rest[0] == ' ' || rest[0] == '\t') {
			line = strings.TrimSpace(rest)
		}
		k, v, hasValue := strings.Cut(line, "=")
		k = strings.TrimSpace(k)
		if !validName(k) {
			return nil, fmt.Errorf("env file line %d: %q is not NAME=VALUE (a name is letters, digits and _, not starting with a digit)", n, clipLine(line))
		}
		if !hasValue {
			e.SetUnresolved(k)
			continue
		}
		e.Set(k, unquote(strings.TrimSpace(v)))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading env file: %w", err)
	}
	return e, nil
}

func validName(k string) bool {
	if k == "" || (k[0] >= '0' && k[0] <= '9') {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c != '_' && (c < '0' || c > '9') && (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') {
			return false
		}
	}
	return true
}

func unquote(v string) string {
	if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
		return v[1 : len(v)-1]
	}
	return v
}

func clipLine(s string) string {
	if len(s) > 80 {
		return s[:77] + "..."
	}
	return s
}
