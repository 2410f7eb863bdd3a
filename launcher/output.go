package launcher

import (
	"io"
	"strings"
	"sync"
)

// stderrWriter carries CMD's stderr and rankgate's own lines to one
// writer, so that they never cut into each other's writes.
type stderrWriter struct {
	mu sync.Mutex
	w  io.Writer
	// midLine: CMD's last write did not end a line.
	midLine bool
}

func (s *stderrWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	n, err := s.w.Write(p)
	if n > 0 {
		s.midLine = p[n-1] != '\n'
	}
	s.mu.Unlock()
	return n, err
}

// say writes msg with every line prefixed "rankgate: ", on a line of its
// own. Errors are dropped: there is nowhere else to report them.
func (s *stderrWriter) say(msg string) {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimRight(msg, "\n"), "\n") {
		b.WriteString("rankgate: ")
		b.WriteString(l)
		b.WriteByte('\n')
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := b.String()
	if s.midLine {
		out = "\n" + out
		s.midLine = false
	}
	_, _ = io.WriteString(s.w, out)
}
