package smi

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/rankgate/rankgate/topology"
)

// Every parser reads pasted text, so each has a fuzzer. Seeds are all the
// nvidia-smi fixtures and variants, whatever their kind: a parser must
// refuse another kind's output with an InputError, not panic. Crashers
// found by `go test -fuzz` are kept in testdata/fuzz as regression seeds.

func seeds(f *testing.F) [][]byte {
	f.Helper()
	var out [][]byte
	for _, pattern := range []string{filepath.Join(sharedDir, "*"), filepath.Join("testdata", "*.txt")} {
		files, err := filepath.Glob(pattern)
		if err != nil {
			f.Fatal(err)
		}
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			// The 100 KB 8-GPU -q adds no shape the small ones lack,
			// and minimizing its mutants stalls the fuzzer.
			if len(data) <= 32<<10 {
				out = append(out, data)
			}
		}
	}
	return out
}

// mustBeInputError fails on errors of any other type: callers rely on the
// type to tell bad input (exit code 2) from other failures.
func mustBeInputError(t *testing.T, err error) {
	t.Helper()
	var ie *topology.InputError
	if !errors.As(err, &ie) {
		t.Fatalf("error is %T, want *topology.InputError: %v", err, err)
	}
	if ie.Line < 0 {
		t.Fatalf("negative line in %v", err)
	}
}

var fuzzCatalog = topology.DefaultCatalog()

// fuzzParser runs one parser on the whole input, then the merge.
func fuzzParser(f *testing.F, kind Kind) {
	for _, s := range seeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d := splitDoc(string(data))
		s := section{d: d, end: len(d.lines)}
		r := &report{file: "fuzz", kind: kind}
		if err := parseSection(kind, s, r, "fuzz-topo-p2p-rw.txt"); err != nil {
			mustBeInputError(t, err)
			return
		}
		b := &builder{cat: fuzzCatalog, links: map[[2]int]*linkState{}}
		if err := b.add(r); err != nil {
			mustBeInputError(t, err)
			return
		}
		b.addHandles("fuzz", d.handles)
		b.finishHandles()
		inv, err := b.finish()
		if err != nil {
			mustBeInputError(t, err)
			return
		}
		inv.Normalize()
		_ = inv.Validate()
	})
}

func FuzzList(f *testing.F)         { fuzzParser(f, KindList) }
func FuzzTopoMatrix(f *testing.F)   { fuzzParser(f, KindTopoMatrix) }
func FuzzTopoP2P(f *testing.F)      { fuzzParser(f, KindTopoP2P) }
func FuzzQuery(f *testing.F)        { fuzzParser(f, KindQuery) }
func FuzzQueryXML(f *testing.F)     { fuzzParser(f, KindQueryXML) }
func FuzzMIGLGI(f *testing.F)       { fuzzParser(f, KindMIGLGI) }
func FuzzMIGLGIP(f *testing.F)      { fuzzParser(f, KindMIGLGIP) }
func FuzzMIGLCI(f *testing.F)       { fuzzParser(f, KindMIGLCI) }
func FuzzTable(f *testing.F)        { fuzzParser(f, KindTable) }
func FuzzNVLinkStatus(f *testing.F) { fuzzParser(f, KindNVLinkStatus) }

// FuzzHandleLine: a line is a device-handle failure with its bus ID in
// NVML's form (or none, when masked), or it is not one.
func FuzzHandleLine(f *testing.F) {
	for _, s := range []string{
		"Unable to determine the device handle for GPU0000:07:00.0: Unknown Error",
		"Unable to determine the device handle for GPU 0000:02:00.0: GPU is lost. Reboot the system to recover this GPU",
		"GPU 1: Unable to determine the device handle for gpu 0000:CB:00.0: Unknown Error",
		"Unable to detect the device handle for GPU0000:B1:00.0: Unknown Error",
		"Unable to determine the device handle for ******: Unknown Error",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		h, ok := parseHandleLine(line)
		if !ok {
			return
		}
		if h.busID != "" {
			if b, err := normBusID(h.busID); err != nil || b != h.busID {
				t.Fatalf("bus ID %q is not in NVML's form", h.busID)
			}
		}
		if h.index >= maxGPUs {
			t.Fatalf("index %d out of range", h.index)
		}
	})
}

func FuzzDetect(f *testing.F) {
	for _, s := range seeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		k, err := Detect(data)
		if err != nil {
			mustBeInputError(t, err)
			return
		}
		if k == "" {
			t.Fatal("no kind and no error")
		}
	})
}

// concatSeeds pastes seeds back to back, with no separator, a blank line,
// or a prompt line of another shell style between them: the inputs that
// splitOutputs cuts at each format's header.
func concatSeeds(f *testing.F) [][]byte {
	all := seeds(f)
	seps := []string{"", "\n", "user@host:~/dir$ nvidia-smi\n", "PS C:\\> nvidia-smi -q\n", "[root@node ~]# nvidia-smi mig -lgi\n"}
	var out [][]byte
	for i := range all {
		a, b := all[i], all[(i+1)%len(all)]
		out = append(out, append(append(append([]byte{}, a...), seps[i%len(seps)]...), b...))
	}
	return out
}

// FuzzSplit checks that the sections of any input are in order, do not
// overlap and stay inside the input.
func FuzzSplit(f *testing.F) {
	for _, s := range append(seeds(f), concatSeeds(f)...) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d := splitDoc(string(data))
		prev := 0
		for _, s := range d.sections {
			if s.first < prev || s.end < s.first || s.end > len(d.lines) {
				t.Fatalf("section [%d,%d) after %d of %d lines", s.first, s.end, prev, len(d.lines))
			}
			prev = s.end
		}
	})
}

// FuzzImport runs the whole path: sections, detection, parsing, merging,
// and the inventory's own checks.
func FuzzImport(f *testing.F) {
	for _, s := range append(seeds(f), concatSeeds(f)...) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		inv, err := Import([]Input{{Name: "fuzz-p2p-rw.txt", Data: data}}, fuzzCatalog)
		if err != nil {
			mustBeInputError(t, err)
			return
		}
		if err := inv.Validate(); err != nil {
			t.Fatalf("Import returned an invalid inventory: %v", err)
		}
	})
}

// FuzzMerge imports two outputs together, where the matching of GPUs and
// MIG devices across outputs is exercised.
func FuzzMerge(f *testing.F) {
	all := seeds(f)
	for i := range all {
		f.Add(all[i], all[(i+1)%len(all)])
		f.Add(all[i], all[(i+3)%len(all)])
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		inv, err := Import([]Input{{Name: "a-p2p-r.txt", Data: a}, {Name: "b-p2p-w.txt", Data: b}}, fuzzCatalog)
		if err != nil {
			mustBeInputError(t, err)
			return
		}
		if err := inv.Validate(); err != nil {
			t.Fatalf("Import returned an invalid inventory: %v", err)
		}
	})
}
