package smi

import (
	"fmt"
	"path"
	"strings"

	"github.com/rankgate/rankgate/topology"
)

// Kind is the nvidia-smi invocation an output came from.
type Kind string

// Kinds of nvidia-smi output that Import reads.
const (
	KindList       Kind = "list"        // nvidia-smi -L
	KindTopoMatrix Kind = "topo-matrix" // nvidia-smi topo -m / -mp
	KindTopoP2P    Kind = "topo-p2p"    // nvidia-smi topo -p2p r|w|rw|n|a|p
	KindQuery      Kind = "query"       // nvidia-smi -q
	KindQueryXML   Kind = "query-xml"   // nvidia-smi -q -x
	KindMIGLGI     Kind = "mig-lgi"     // nvidia-smi mig -lgi
	KindMIGLGIP    Kind = "mig-lgip"    // nvidia-smi mig -lgip (and -lgipp placements)
	KindMIGLCI     Kind = "mig-lci"     // nvidia-smi mig -lci
	KindTable      Kind = "table"       // plain nvidia-smi
)

// expected is the list of outputs Import reads, for error messages.
const expected = "expected the output of one of: nvidia-smi, nvidia-smi -L, nvidia-smi -q, " +
	"nvidia-smi -q -x, nvidia-smi topo -m, nvidia-smi topo -p2p r|w|rw|n|a, " +
	"nvidia-smi mig -lgi, nvidia-smi mig -lgip, nvidia-smi mig -lci"

// Detect tells which nvidia-smi output data is, by its content. A leading
// shell prompt line (`$ nvidia-smi -L`) is allowed; when data holds several
// commands with their outputs, Detect names the first output it recognises.
// Text that is no nvidia-smi output is a *topology.InputError.
func Detect(data []byte) (Kind, error) {
	doc := splitDoc(string(data))
	for _, s := range doc.sections {
		if s.skip() {
			continue
		}
		k, err := s.detect()
		if err != nil {
			return "", err
		}
		return k, nil
	}
	return "", &topology.InputError{Msg: "no nvidia-smi output found; " + expected}
}

// doc is one input split into lines and into sections at shell prompt
// lines. Lines keep their 1-based numbers for errors.
type doc struct {
	text     string
	lines    []string // without line ends
	offsets  []int    // byte offset of each line in text
	sections []section
}

// section is the output of one command: the lines after a prompt line up to
// the next prompt line (or the whole input when there is no prompt).
type section struct {
	d     *doc
	cmd   string // the command line after the prompt, "" when none
	first int    // index into d.lines of the first body line
	end   int    // one past the last body line
}

// lineNo turns an index into doc.lines into a 1-based line number.
func lineNo(i int) int { return i + 1 }

func splitDoc(text string) *doc {
	text = strings.TrimPrefix(text, "\ufeff")
	d := &doc{text: text}
	n := strings.Count(text, "\n") + 1
	d.lines = make([]string, 0, n)
	d.offsets = make([]int, 0, n)
	for off := 0; off <= len(text); {
		i := strings.IndexByte(text[off:], '\n')
		var l string
		next := len(text) + 1
		if i < 0 {
			l = text[off:]
		} else {
			l = text[off : off+i]
			next = off + i + 1
		}
		d.lines = append(d.lines, strings.TrimRight(l, "\r"))
		d.offsets = append(d.offsets, off)
		off = next
	}
	cur := section{d: d}
	for i, l := range d.lines {
		cmd, ok := promptCommand(l)
		if !ok {
			continue
		}
		cur.end = i
		d.sections = append(d.sections, cur)
		cur = section{d: d, cmd: cmd, first: i + 1}
	}
	cur.end = len(d.lines)
	d.sections = append(d.sections, cur)
	return d
}

// body returns the section's lines; body()[k] is doc line s.first+k.
func (s section) body() []string { return s.d.lines[s.first:s.end] }

// text returns the section's body as one string, line ends included.
func (s section) text() string {
	if s.first >= len(s.d.lines) {
		return ""
	}
	end := len(s.d.text)
	if s.end < len(s.d.lines) {
		end = s.d.offsets[s.end]
	}
	return s.d.text[s.d.offsets[s.first]:end]
}

// args returns the arguments of the nvidia-smi command of the section's
// prompt line, and whether the prompt named nvidia-smi at all.
func (s section) args() ([]string, bool) { return smiArgs(s.cmd) }

// skip reports whether the section carries nothing to read: an empty body,
// or the output of a command other than nvidia-smi (`$ lspci`).
func (s section) skip() bool {
	if _, isSMI := s.args(); s.cmd != "" && !isSMI {
		return true
	}
	for _, l := range s.body() {
		if !isBlank(l) {
			return false
		}
	}
	return true
}

// isBlank reports whether a line carries nothing: empty, a markdown code
// fence around the paste, or a "#" comment or heading. No nvidia-smi output
// starts a line with "#".
func isBlank(l string) bool {
	t := strings.TrimSpace(l)
	return t == "" || strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") || strings.HasPrefix(t, "#")
}

// promptCommand recognises a shell prompt line ("$ nvidia-smi -L",
// "root@node:~# nvidia-smi topo -m", "[root@node ~]# ...", "PS C:\> ...",
// "(venv) user@host:~$ ...") and a bare "nvidia-smi ..." line, and returns
// the command after the prompt. People paste several commands with their
// outputs in one file; prompt lines are where one output ends.
func promptCommand(line string) (string, bool) {
	t := strings.TrimSpace(line)
	if t == "" {
		return "", false
	}
	if strings.HasPrefix(t, "nvidia-smi") || strings.HasPrefix(t, "sudo nvidia-smi") {
		if _, ok := smiArgs(t); ok {
			return t, true
		}
	}
	// A leading "(env) " of conda or venv.
	if t[0] == '(' {
		if i := strings.Index(t, ") "); i > 0 && !strings.ContainsAny(t[:i], " ") {
			t = strings.TrimSpace(t[i+2:])
		}
	}
	if strings.HasPrefix(t, "PS ") {
		if i := strings.Index(t, "> "); i > 0 && strings.Contains(t[:i], ":\\") {
			return strings.TrimSpace(t[i+2:]), true
		}
		if strings.HasSuffix(t, ">") && strings.Contains(t, ":\\") {
			return "", true
		}
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if c != '$' && c != '#' && c != '>' && c != '%' {
			continue
		}
		if i+1 < len(t) && t[i+1] != ' ' && t[i+1] != '\t' {
			continue
		}
		if !promptPrefix(t[:i]) {
			return "", false
		}
		cmd := strings.TrimSpace(t[i+1:])
		if c == '#' && i == 0 {
			// A bare "# ..." is a root prompt or a comment ("# GPU
			// topology" above a paste): unless it runs nvidia-smi, what
			// follows is read by its content.
			if _, ok := smiArgs(cmd); !ok {
				return "", true
			}
		}
		return cmd, true
	}
	return "", false
}

// promptPrefix reports whether p can stand before a prompt character: empty,
// "user@host:path", "[user@host dir]", "host:path" or a Windows path.
func promptPrefix(p string) bool {
	switch {
	case p == "", p == "~":
		return true
	case strings.HasPrefix(p, "[") && strings.HasSuffix(p, "]") && !strings.Contains(p[1:len(p)-1], "]"):
		return strings.Contains(p, "@") || strings.Count(p, " ") <= 1
	case strings.ContainsAny(p, " \t|<>\"'=;"):
		return false
	case strings.Contains(p, "@"):
		return true
	case len(p) >= 3 && p[1] == ':' && p[2] == '\\':
		return true
	}
	return false
}

// smiArgs finds the nvidia-smi invocation in a command line ("sudo
// nvidia-smi -L", "kubectl exec pod -- nvidia-smi -q | less") and returns its
// arguments up to a pipe.
func smiArgs(cmd string) ([]string, bool) {
	f := strings.Fields(cmd)
	for i, w := range f {
		base := path.Base(strings.ReplaceAll(w, "\\", "/"))
		if base != "nvidia-smi" && base != "nvidia-smi.exe" {
			continue
		}
		var args []string
		for _, a := range f[i+1:] {
			if a == "|" || a == ">" || a == ">>" || a == ";" || a == "&&" || a == "2>&1" {
				break
			}
			args = append(args, a)
		}
		return args, true
	}
	return nil, false
}

// detect tells the kind of output in the section by its content.
func (s section) detect() (Kind, error) {
	body := s.body()
	firstText := -1
	for i, l := range body {
		if !isBlank(l) {
			firstText = i
			break
		}
	}
	if firstText < 0 {
		return "", s.errAt(s.first, "empty output; "+expected)
	}
	head := strings.TrimSpace(body[firstText])
	at := s.first + firstText
	switch {
	case strings.HasPrefix(head, "<?xml") || strings.HasPrefix(head, "<nvidia_smi_log") || strings.HasPrefix(head, "<!DOCTYPE nvidia_smi_log"):
		return KindQueryXML, nil
	case strings.Contains(head, "NVSMI LOG"):
		return KindQuery, nil
	}
	if msg, ok := smiFailure(head); ok {
		return "", s.errAt(at, msg)
	}
	if isListLine(head) {
		return KindList, nil
	}
	if fs := strings.Fields(head); len(fs) > 0 && fs[0] == "GPU0" {
		return s.detectTopo(firstText)
	}
	// Boxed tables: look at the titles inside the first few lines.
	for i := firstText; i < len(body) && i < firstText+12; i++ {
		t := strings.TrimSpace(body[i])
		switch {
		case strings.Contains(t, "GPU instance profiles:"):
			return KindMIGLGIP, nil
		case strings.Contains(t, "GPU instances:"), strings.HasPrefix(t, "No GPU instances found"):
			return KindMIGLGI, nil
		case strings.Contains(t, "Compute instances:"), strings.HasPrefix(t, "No compute instances found"):
			return KindMIGLCI, nil
		case strings.Contains(t, "Compute instance profiles:"):
			return "", s.errAt(s.first+i, "nvidia-smi mig -lcip (compute instance profiles) is not read; "+expected)
		case isPlacementLine(t):
			return KindMIGLGIP, nil
		case strings.HasPrefix(t, "|") && strings.Contains(t, "NVIDIA-SMI") && strings.Contains(t, "Driver Version"),
			strings.HasPrefix(t, "|") && strings.Contains(t, "MIG devices:"),
			strings.HasPrefix(t, "|") && strings.Contains(t, "Bus-Id") && strings.Contains(t, "Name"):
			return KindTable, nil
		}
	}
	return "", s.errAt(at, fmt.Sprintf("%q is not the start of an nvidia-smi output; %s", clip(head), expected))
}

// smiFailure recognises nvidia-smi's own error messages, pasted instead of
// an output.
func smiFailure(line string) (string, bool) {
	for _, m := range []string{
		"No devices were found",
		"NVIDIA-SMI has failed",
		"Failed to initialize NVML",
		"No MIG-enabled devices found",
		"Unable to determine the device handle",
		"Insufficient Permissions",
	} {
		if strings.Contains(line, m) {
			return fmt.Sprintf("nvidia-smi reported an error instead of an output: %q", clip(line)), true
		}
	}
	return "", false
}

// detectTopo tells a `topo -m` matrix from a `topo -p2p` one. The legend says
// which when it is there; otherwise the cells do.
func (s section) detectTopo(from int) (Kind, error) {
	body := s.body()
	for _, l := range body[from:] {
		t := strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(t, "OK") && strings.Contains(t, "="):
			return KindTopoP2P, nil
		case strings.HasPrefix(t, "NV#"), strings.HasPrefix(t, "SYS") && strings.Contains(t, "="),
			strings.Contains(t, "CPU Affinity"):
			return KindTopoMatrix, nil
		}
	}
	for _, l := range body[from+1:] {
		fs := strings.Fields(l)
		if len(fs) < 2 || !strings.HasPrefix(fs[0], "GPU") {
			continue
		}
		for _, c := range fs[1:] {
			if _, ok := p2pStatus(c); ok && c != "X" {
				return KindTopoP2P, nil
			}
			if _, _, err := topoLevel(c); err == nil && c != "X" {
				return KindTopoMatrix, nil
			}
		}
	}
	return "", s.errAt(s.first+from, "a GPU matrix that is neither `nvidia-smi topo -m` nor `topo -p2p`; "+expected)
}

// errAt builds an InputError at line index i of the document.
func (s section) errAt(i int, msg string) *topology.InputError {
	return &topology.InputError{Line: lineNo(i), Msg: msg}
}

// clip shortens a line quoted in an error message.
func clip(s string) string {
	const max = 80
	if len(s) > max {
		return s[:max] + "..."
	}
	return s
}
