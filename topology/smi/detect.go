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
	// KindDeviceHandle is nvidia-smi's "Unable to determine the device
	// handle for GPU<bus>: <reason>" lines (handle.go), alone or inside
	// any other output.
	KindDeviceHandle Kind = "device-handle"
	// KindNVLinkStatus is nvidia-smi nvlink -s / --status.
	KindNVLinkStatus Kind = "nvlink-status"
)

// expected is the list of outputs Import reads, for error messages.
const expected = "expected the output of one of: nvidia-smi, nvidia-smi -L, nvidia-smi -q, " +
	"nvidia-smi -q -x, nvidia-smi topo -m, nvidia-smi topo -p2p r|w|rw|n|a, nvidia-smi nvlink -s, " +
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
	if len(doc.handles) > 0 {
		return KindDeviceHandle, nil
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
	// handles are the GPUs nvidia-smi could not open (handle.go); their
	// lines are blanked in lines.
	handles []handleFact
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
	d.takeHandleLines()
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
	var split []section
	for _, sec := range d.sections {
		split = append(split, sec.splitOutputs()...)
	}
	d.sections = split
	return d
}

// splitOutputs splits a section that holds several outputs pasted back to
// back without prompt lines between them (`mig -lgip` directly followed by
// `mig -lgi`, a table then `-L`), at the line where each format's own
// header starts. The prompt's command belongs to the first output only.
func (s section) splitOutputs() []section {
	if _, isSMI := s.args(); s.cmd != "" && !isSMI {
		return []section{s} // another command's output: skipped whole
	}
	var out []section
	cur := s
	var curKind Kind
	lines := s.d.lines
	for i := s.first; i < s.end; i++ {
		k, ok := headerKind(lines, i, s.end)
		if !ok {
			continue
		}
		switch {
		case curKind == "":
			curKind = k
			continue
		case k == KindList && curKind == KindList, k == KindNVLinkStatus && curKind == KindNVLinkStatus:
			continue // the next GPU of the same -L or nvlink -s
		case k == kindLGIPP && (curKind == KindMIGLGIP || curKind == kindLGIPP):
			continue // -lgipp lines after -lgip, or the next one
		}
		start := headerStart(lines, i, cur.first, k)
		if start <= cur.first {
			curKind = k
			continue
		}
		cur.end = start
		out = append(out, cur)
		cur = section{d: s.d, first: start, end: s.end}
		curKind = k
	}
	return append(out, cur)
}

// kindLGIPP marks a `mig -lgipp` placement line for splitOutputs; such
// lines are read with -lgip (KindMIGLGIP).
const kindLGIPP Kind = "mig-lgipp"

// headerKind recognises the first line of an output by the format's own
// header: the "NVSMI LOG" banner of -q, the XML declaration of -q -x, the
// column header row of topo matrices, a GPU line of -L, the title rows of
// the mig listings and the version row of the table.
func headerKind(lines []string, i, end int) (Kind, bool) {
	t := strings.TrimSpace(lines[i])
	switch {
	case t == "":
		return "", false
	case strings.HasPrefix(t, "<?xml"):
		return KindQueryXML, true
	case strings.HasPrefix(t, "<!DOCTYPE nvidia_smi_log") || strings.HasPrefix(t, "<nvidia_smi_log"):
		// the XML declaration and DOCTYPE above it start the same output
		for j := i - 1; j >= 0; j-- {
			p := strings.TrimSpace(lines[j])
			if p == "" {
				continue
			}
			if strings.HasPrefix(p, "<?xml") || strings.HasPrefix(p, "<!DOCTYPE") {
				return "", false
			}
			break
		}
		return KindQueryXML, true
	case strings.Contains(t, "NVSMI LOG"):
		return KindQuery, true
	case isListLine(t) && nvlinkStatusAt(lines, i, end):
		return KindNVLinkStatus, true
	case isListLine(t):
		return KindList, true
	case isPlacementLine(t):
		return kindLGIPP, true
	}
	if fs := strings.Fields(t); len(fs) >= 2 && fs[0] == "GPU0" && fs[1] != "X" {
		return KindTopoMatrix, true // matrix header row; -m or -p2p: detect tells
	}
	if !strings.HasPrefix(t, "|") {
		return "", false
	}
	inner := strings.TrimSpace(strings.Trim(t, "|"))
	switch {
	case strings.HasPrefix(inner, "GPU instance profiles:"):
		return KindMIGLGIP, true
	case strings.HasPrefix(inner, "GPU instances:"):
		return KindMIGLGI, true
	case strings.HasPrefix(inner, "Compute instances:"):
		return KindMIGLCI, true
	case strings.HasPrefix(inner, "Compute instance profiles:"):
		return Kind("mig-lcip"), true
	case strings.Contains(inner, "NVIDIA-SMI") && strings.Contains(inner, "Driver Version"):
		return KindTable, true
	}
	return "", false
}

// headerStart moves a header line up to where its output starts: the box
// rule above a boxed title, and the timestamp line above the table.
func headerStart(lines []string, i, min int, k Kind) int {
	t := func(j int) string { return strings.TrimSpace(lines[j]) }
	switch k {
	case KindQueryXML, KindQuery, KindList, KindNVLinkStatus, KindTopoMatrix, kindLGIPP:
		return i
	}
	if i-1 >= min && strings.HasPrefix(t(i-1), "+") {
		i--
	}
	if k == KindTable && i-1 >= min && isTimestamp(t(i-1)) {
		i--
	}
	return i
}

// isTimestamp recognises the date line nvidia-smi prints above its table
// ("Fri Sep  9 05:56:21 2022").
func isTimestamp(t string) bool {
	f := strings.Fields(t)
	if len(f) != 5 || !strings.Contains(f[3], ":") {
		return false
	}
	switch f[0] {
	case "Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun":
		return true
	}
	return false
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
// "user@host:path", "[user@host dir]", "user@host dir" (zsh), "host:path"
// or a Windows path.
func promptPrefix(p string) bool {
	switch {
	case p == "", p == "~":
		return true
	case strings.HasPrefix(p, "[") && strings.HasSuffix(p, "]") && !strings.Contains(p[1:len(p)-1], "]"):
		return strings.Contains(p, "@") || strings.Count(p, " ") <= 1
	case zshPrompt(strings.TrimSuffix(p, " ")):
		return true // zsh: "user@host ~ % "
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
		if !isBlank(l) && !isElision(l) {
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
		return s.listKind(at), nil
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
		case isTableLine(t):
			return KindTable, nil
		}
	}
	return "", s.errAt(at, fmt.Sprintf("%q is not the start of an nvidia-smi output; %s", clip(head), expected))
}

// listKind tells -L from nvlink -s, whose GPU lines are the same: in
// nvlink -s link lines follow them.
func (s section) listKind(at int) Kind {
	if nvlinkStatusAt(s.d.lines, at, s.end) {
		return KindNVLinkStatus
	}
	return KindList
}

// isTableLine recognises a line near the top of a plain table: the
// version row, the MIG devices title, the column header, or a GPU row of
// a table pasted without its header.
func isTableLine(t string) bool {
	if !strings.HasPrefix(t, "|") {
		return false
	}
	return strings.Contains(t, "NVIDIA-SMI") && strings.Contains(t, "Driver Version") ||
		strings.Contains(t, "MIG devices:") ||
		strings.Contains(t, "Bus-Id") && strings.Contains(t, "Name") ||
		looksGPURow(cells(t))
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

// zshPrompt recognises zsh's default "user@host dir" before its "%".
func zshPrompt(p string) bool {
	user, dir, ok := strings.Cut(p, " ")
	return ok && strings.Contains(user, "@") && dir != "" && !strings.ContainsAny(dir, " \t|<>\"'=;@")
}
