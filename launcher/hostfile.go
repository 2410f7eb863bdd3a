package launcher

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Host is one host of an MPI hostfile, its lines merged.
type Host struct {
	Name string
	// Slots is the sum of the host's slots; SlotsKnown is false when a line
	// for it gave none (Open MPI then decides by itself, from the cores).
	Slots      int
	SlotsKnown bool
	// Line is the first line that names the host.
	Line int
}

// Hostfile is a parsed MPI hostfile.
type Hostfile struct {
	Hosts []Host
}

// TotalSlots is the sum of all slots, and whether every host gave its own.
func (h *Hostfile) TotalSlots() (int, bool) {
	total, known := 0, true
	for _, x := range h.Hosts {
		total += x.Slots
		known = known && x.SlotsKnown
	}
	return total, known
}

// maxSlots bounds a slot count, so that sums cannot overflow.
const maxSlots = 1 << 20

// MaxHostfileSize bounds a hostfile: a line per host ("pod.svc.ns.svc
// slots=8", about 60 bytes), so 4 MiB is some 70,000 hosts.
const MaxHostfileSize = 4 << 20

// ParseHostfile reads an Open MPI hostfile ("host slots=N max_slots=M",
// what the MPIJob operator writes to /etc/mpi/hostfile) or an Intel MPI /
// MPICH machinefile ("host:N"). Comments start with #. Errors name the
// line.
func ParseHostfile(data []byte) (*Hostfile, error) {
	h := &Hostfile{}
	index := map[string]int{}
	for i, raw := range strings.Split(string(data), "\n") {
		lineNo := i + 1
		line := raw
		if c := strings.IndexByte(line, '#'); c >= 0 {
			line = line[:c]
		}
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		name, slots, known, err := parseHostSpec(fields[0])
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", lineNo, err)
		}
		for _, f := range fields[1:] {
			key, val, ok := strings.Cut(f, "=")
			if !ok {
				return nil, fmt.Errorf("line %d: %q is not key=value (want \"host slots=N\" or \"host:N\")", lineNo, f)
			}
			switch key {
			case "slots":
				if known {
					return nil, fmt.Errorf("line %d: slots given twice", lineNo)
				}
				if slots, err = parseSlots(val); err != nil {
					return nil, fmt.Errorf("line %d: slots: %w", lineNo, err)
				}
				known = true
			case "max_slots", "max-slots":
				if _, err := parseSlots(val); err != nil {
					return nil, fmt.Errorf("line %d: %s: %w", lineNo, key, err)
				}
			default:
				// Other keys (Hydra's, newer Open MPI's) do not change the
				// slot count; mpirun judges them.
			}
		}
		if j, ok := index[name]; ok {
			x := &h.Hosts[j]
			x.Slots = min(x.Slots+slots, maxSlots)
			x.SlotsKnown = x.SlotsKnown && known
			continue
		}
		index[name] = len(h.Hosts)
		h.Hosts = append(h.Hosts, Host{Name: name, Slots: slots, SlotsKnown: known, Line: lineNo})
	}
	if len(h.Hosts) == 0 {
		return nil, fmt.Errorf("no hosts")
	}
	return h, nil
}

// parseHostSpec reads "host", "host:N", "[v6addr]", "[v6addr]:N" or a bare
// IPv6 address.
func parseHostSpec(s string) (name string, slots int, known bool, err error) {
	slots = 1
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", 0, false, fmt.Errorf("host %q: missing ]", s)
		}
		name = s[1:end]
		if ip := net.ParseIP(name); ip == nil || ip.To4() != nil {
			return "", 0, false, fmt.Errorf("host %q: not an IPv6 address", s)
		}
		rest := s[end+1:]
		if rest != "" {
			if !strings.HasPrefix(rest, ":") {
				return "", 0, false, fmt.Errorf("host %q: unexpected %q after ]", s, rest)
			}
			if slots, err = parseSlots(rest[1:]); err != nil {
				return "", 0, false, fmt.Errorf("host %q: %w", s, err)
			}
			known = true
		}
		return name, slots, known, nil
	case strings.Count(s, ":") > 1:
		if net.ParseIP(s) == nil {
			return "", 0, false, fmt.Errorf("host %q: not a hostname or IP address", s)
		}
		return s, slots, false, nil
	}
	name, n, hasN := strings.Cut(s, ":")
	if hasN {
		if slots, err = parseSlots(n); err != nil {
			return "", 0, false, fmt.Errorf("host %q: %w", s, err)
		}
		known = true
	}
	if err := checkHostname(name); err != nil {
		return "", 0, false, err
	}
	return name, slots, known, nil
}

func parseSlots(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > maxSlots {
		return 0, fmt.Errorf("%q is not a slot count (0 to %d)", s, maxSlots)
	}
	return n, nil
}

// checkHostname accepts DNS names (letters, digits, '-', '_', '.') and
// IPv4 addresses.
func checkHostname(s string) error {
	if s == "" || len(s) > 253 {
		return fmt.Errorf("host %q: not a hostname", s)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("host %q: character %q is not allowed in a hostname", s, c)
		}
	}
	if s[0] == '.' || s[0] == '-' || strings.Contains(s, "..") {
		return fmt.Errorf("host %q: not a hostname", s)
	}
	return nil
}
