package launcher

import "bytes"

// maxLine bounds the part of a line the scanner looks at. NCCL lines are a
// few hundred bytes; a longer line is looked at in its first maxLine bytes
// around an anchor, or skipped when no anchor falls inside that window.
const maxLine = 16 << 10

// scanMode says which lines the scanner hands on: every line, or only
// lines that contain one of a few anchors.
type scanMode struct {
	all     bool
	anchors [][]byte
}

// wants reports whether a complete line is to be handed on.
func (m *scanMode) wants(line []byte) bool {
	if m.all {
		return true
	}
	for _, a := range m.anchors {
		if bytes.Contains(line, a) {
			return true
		}
	}
	return false
}

// maxAnchors bounds the anchor set (fixed array, no allocation per chunk).
const maxAnchors = 8

// lineScanner cuts a stream of chunks into lines and hands on the lines a
// scanMode wants. In anchor mode it never walks the chunk line by line: it
// searches the chunk for the anchors (bytes.Index, vectorised) and only
// around a hit looks for the line's ends, so a chunk without an anchor
// costs one pass per anchor and no allocation. The only copy it makes is
// of the unfinished last line of a chunk (at most maxLine bytes), so that
// lines and anchors that straddle two chunks are still seen whole.
type lineScanner struct {
	handle   func(line []byte)
	partial  []byte
	overflow bool // the unfinished line is longer than maxLine: skip it
}

func newLineScanner(handle func([]byte)) *lineScanner {
	return &lineScanner{handle: handle, partial: make([]byte, 0, 1024)}
}

// scan consumes one chunk.
func (s *lineScanner) scan(p []byte, m *scanMode) {
	if len(s.partial) > 0 || s.overflow {
		nl := bytes.IndexByte(p, '\n')
		if nl < 0 {
			s.keep(p)
			return
		}
		if s.keep(p[:nl]) && m.wants(s.partial) {
			s.handle(trimCR(s.partial))
		}
		s.partial = s.partial[:0]
		s.overflow = false
		p = p[nl+1:]
	}
	// p starts at the start of a line.
	if m.all {
		s.scanAll(p)
	} else {
		s.scanAnchors(p, m.anchors)
	}
}

// flush hands on the last line of a stream that did not end in a newline.
func (s *lineScanner) flush(m *scanMode) {
	if len(s.partial) > 0 && !s.overflow && m.wants(s.partial) {
		s.handle(trimCR(s.partial))
	}
	s.partial = s.partial[:0]
	s.overflow = false
}

// keep appends to the unfinished line; false once it is too long.
func (s *lineScanner) keep(b []byte) bool {
	if s.overflow {
		return false
	}
	if len(s.partial)+len(b) > maxLine {
		s.overflow = true
		s.partial = s.partial[:0]
		return false
	}
	s.partial = append(s.partial, b...)
	return true
}

func (s *lineScanner) scanAll(p []byte) {
	for len(p) > 0 {
		nl := bytes.IndexByte(p, '\n')
		if nl < 0 {
			s.keep(p)
			return
		}
		line := p[:nl]
		if len(line) > maxLine {
			line = line[:maxLine]
		}
		s.handle(trimCR(line))
		p = p[nl+1:]
	}
}

func (s *lineScanner) scanAnchors(p []byte, anchors [][]byte) {
	if len(anchors) > maxAnchors {
		anchors = anchors[:maxAnchors]
	}
	// next[i]: position of anchor i's next hit at or after pos; -1 none
	// left in this chunk; -2 not searched yet.
	var next [maxAnchors]int
	for i := range anchors {
		next[i] = -2
	}
	pos := 0
	for {
		hit := -1
		for i, a := range anchors {
			if next[i] == -2 || (next[i] >= 0 && next[i] < pos) {
				if j := bytes.Index(p[pos:], a); j >= 0 {
					next[i] = pos + j
				} else {
					next[i] = -1
				}
			}
			if next[i] >= 0 && (hit < 0 || next[i] < hit) {
				hit = next[i]
			}
		}
		if hit < 0 {
			break
		}
		start := lineStart(p, pos, hit)
		end := bytes.IndexByte(p[hit:], '\n')
		if end < 0 {
			// The line goes on in the next chunk.
			if len(p)-start <= maxLine {
				s.keep(p[start:])
			} else {
				s.handle(trimCR(p[start : hit+min(maxLine, len(p)-hit)]))
				s.overflow = true
			}
			return
		}
		end += hit
		line := p[start:end]
		if end-hit > maxLine {
			line = p[start : hit+maxLine]
		}
		s.handle(trimCR(line))
		pos = end + 1
	}
	// Keep the unfinished last line: an anchor may straddle the chunks.
	tail := p[pos:]
	lo := max(0, len(tail)-maxLine-1)
	switch k := bytes.LastIndexByte(tail[lo:], '\n'); {
	case k >= 0:
		s.keep(tail[lo+k+1:])
	case len(tail) <= maxLine:
		s.keep(tail)
	default:
		s.overflow = true
	}
}

// lineStart finds the start of the line holding p[hit], looking back no
// further than pos and maxLine bytes.
func lineStart(p []byte, pos, hit int) int {
	lo := max(pos, hit-maxLine)
	if k := bytes.LastIndexByte(p[lo:hit], '\n'); k >= 0 {
		return lo + k + 1
	}
	return lo
}

func trimCR(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == '\r' {
		return b[:n-1]
	}
	return b
}
