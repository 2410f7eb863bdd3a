package launcher

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// collect runs a scanner over chunks and returns the lines it handed on.
func collect(chunks [][]byte, m *scanMode) []string {
	var got []string
	s := newLineScanner(func(l []byte) { got = append(got, string(l)) })
	for _, c := range chunks {
		s.scan(c, m)
	}
	s.flush(m)
	return got
}

// reference is what the scanner must hand on: every line that contains an
// anchor (or every line), without "\n" and a trailing "\r".
func reference(text string, m *scanMode) []string {
	var out []string
	lines := strings.Split(text, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	for _, l := range lines {
		l = strings.TrimSuffix(l, "\r")
		if m.wants([]byte(l)) {
			out = append(out, l)
		}
	}
	return out
}

func split(b []byte, rng *rand.Rand, maxChunk int) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		n := 1 + rng.IntN(min(maxChunk, len(b)))
		out = append(out, b[:n])
		b = b[n:]
	}
	return out
}

func TestLineScannerMatchesReferenceOnAnySplit(t *testing.T) {
	text := "alpha\nnode:1:2 [0] NCCL INFO Init START\r\nbeta NCCL\n\nNCCL at start\ngamma device ordinal x\nno newline at end NCCL"
	modes := map[string]*scanMode{
		"anchors": {anchors: [][]byte{tokNCCL, []byte("device ordinal")}},
		"all":     {all: true},
	}
	for name, m := range modes {
		t.Run(name, func(t *testing.T) {
			want := reference(text, m)
			// Every single split point, then random multi-splits.
			for i := 0; i <= len(text); i++ {
				got := collect([][]byte{[]byte(text[:i]), []byte(text[i:])}, m)
				require.Equal(t, want, got, "split at %d", i)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			for i := 0; i < 500; i++ {
				require.Equal(t, want, collect(split([]byte(text), rng, 7), m))
			}
		})
	}
}

func TestLineScannerRandomText(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	words := []string{"NCCL", "NC", "CL", "step", " ", "\n", "\r\n", "x", "device", " ordinal", "device ordinal", "\x00", "\xff"}
	m := &scanMode{anchors: [][]byte{tokNCCL, []byte("device ordinal")}}
	for i := 0; i < 300; i++ {
		var b strings.Builder
		for j := 0; j < 200; j++ {
			b.WriteString(words[rng.IntN(len(words))])
		}
		text := b.String()
		require.Equal(t, reference(text, m), collect(split([]byte(text), rng, 40), m), "text %q", text)
	}
}

func TestLineScannerLongLines(t *testing.T) {
	m := &scanMode{anchors: [][]byte{tokNCCL}}
	long := strings.Repeat("x", 3*maxLine)
	text := long + "\n" + "short NCCL line\n" + long + " NCCL far in a long line\n" + "NCCL then " + long + "\n" + "tail NCCL\n"
	got := collect(split([]byte(text), rand.New(rand.NewPCG(5, 6)), 4096), m)
	// The short lines are handed on whole; the long ones as a window
	// around the anchor, never more than 2*maxLine bytes, never skipped
	// when the anchor lies within maxLine of where the scanner looks.
	require.Contains(t, got, "short NCCL line")
	require.Contains(t, got, "tail NCCL")
	for _, l := range got {
		require.LessOrEqual(t, len(l), 2*maxLine)
		require.Contains(t, l, "NCCL")
	}
}

func TestLineScannerNoAllocationsPerChunk(t *testing.T) {
	block := bytes.Repeat([]byte("step 1 | loss 0.1 | NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\nplain line without the anchor\n"), 2000)
	m := &scanMode{anchors: [][]byte{tokNCCL}}
	n := 0
	s := newLineScanner(func([]byte) { n++ })
	s.scan(block[:1000], m) // warm the partial buffer
	allocs := testing.AllocsPerRun(20, func() {
		for off := 0; off+4096 <= len(block); off += 4096 {
			s.scan(block[off:off+4096], m)
		}
	})
	require.Zero(t, allocs)
	require.Positive(t, n)
}
