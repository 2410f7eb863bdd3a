package launcher

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseHostfile(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		hosts []Host
		total int
		known bool
	}{
		{
			name: "MPIJob operator's hostfile",
			in:   "pi-worker-0.pi.default.svc slots=2\npi-worker-1.pi.default.svc slots=2\n",
			hosts: []Host{
				{Name: "pi-worker-0.pi.default.svc", Slots: 2, SlotsKnown: true, Line: 1},
				{Name: "pi-worker-1.pi.default.svc", Slots: 2, SlotsKnown: true, Line: 2},
			},
			total: 4, known: true,
		},
		{
			name: "comments, blanks, max_slots, repeated host",
			in:   "# workers\n\n  node-a slots=4 max_slots=8  # first\nnode-b slots=1 max-slots=1\nnode-a slots=2\n",
			hosts: []Host{
				{Name: "node-a", Slots: 6, SlotsKnown: true, Line: 3},
				{Name: "node-b", Slots: 1, SlotsKnown: true, Line: 4},
			},
			total: 7, known: true,
		},
		{
			name:  "Intel MPI / MPICH machinefile",
			in:    "host1:4\nhost2:4\n10.0.0.7:2\n",
			hosts: []Host{{Name: "host1", Slots: 4, SlotsKnown: true, Line: 1}, {Name: "host2", Slots: 4, SlotsKnown: true, Line: 2}, {Name: "10.0.0.7", Slots: 2, SlotsKnown: true, Line: 3}},
			total: 10, known: true,
		},
		{
			name:  "no slots: count unknown",
			in:    "127.0.0.1\nnode-b slots=2\n",
			hosts: []Host{{Name: "127.0.0.1", Slots: 1, Line: 1}, {Name: "node-b", Slots: 2, SlotsKnown: true, Line: 2}},
			total: 3, known: false,
		},
		{
			name:  "IPv6",
			in:    "::1 slots=2\n[fe80::1]:3\n",
			hosts: []Host{{Name: "::1", Slots: 2, SlotsKnown: true, Line: 1}, {Name: "fe80::1", Slots: 3, SlotsKnown: true, Line: 2}},
			total: 5, known: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := ParseHostfile([]byte(tt.in))
			require.NoError(t, err)
			require.Equal(t, tt.hosts, h.Hosts)
			total, known := h.TotalSlots()
			require.Equal(t, tt.total, total)
			require.Equal(t, tt.known, known)
		})
	}
}

func TestParseHostfileErrors(t *testing.T) {
	tests := map[string]string{
		"":                           "no hosts",
		"# only a comment\n":         "no hosts",
		"node slots=x\n":             "line 1: slots",
		"ok slots=1\nnode slots=-1":  "line 2: slots",
		"node:abc":                   "line 1: host \"node:abc\"",
		"node slots=1 slots=2":       "slots given twice",
		"node:2 slots=2":             "slots given twice",
		"node extra":                 "not key=value",
		"no$de slots=1":              "not allowed in a hostname",
		"[10.0.0.1]:2":               "not an IPv6 address",
		"a:b:c slots=1":              "not a hostname or IP address",
		"node slots=99999999999999":  "slot count",
		"-node slots=1":              "not a hostname",
		"node..x slots=1":            "not a hostname",
		strings.Repeat("a", 300):     "not a hostname",
		"[::1":                       "missing ]",
		"[::1]x":                     "unexpected",
		"node slots=1 max_slots=abc": "max_slots",
	}
	for in, want := range tests {
		_, err := ParseHostfile([]byte(in))
		require.ErrorContains(t, err, want, "input %q", in)
	}
}

// FuzzParseHostfile: any input either fails with a line-numbered error or
// yields hosts that, written back out, parse to the same hosts.
func FuzzParseHostfile(f *testing.F) {
	for _, s := range []string{
		"pi-worker-0.pi.default.svc slots=2\npi-worker-1.pi.default.svc slots=2\n",
		"host1:4\nhost2:4\n", "::1 slots=2\n[fe80::1]:3\n", "# c\n\nnode slots=1 max_slots=2 # x\n",
		"a\nb\na slots=3\n", "10.0.0.1:0\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := ParseHostfile(data)
		if err != nil {
			return
		}
		require.NotEmpty(t, h.Hosts)
		var b strings.Builder
		seen := map[string]bool{}
		sum := 0
		for _, x := range h.Hosts {
			require.False(t, seen[x.Name], "host %q listed twice", x.Name)
			seen[x.Name] = true
			require.GreaterOrEqual(t, x.Slots, 0)
			require.LessOrEqual(t, x.Slots, maxSlots)
			require.Positive(t, x.Line)
			sum += x.Slots
			if x.SlotsKnown {
				fmt.Fprintf(&b, "%s slots=%d\n", x.Name, x.Slots)
			} else {
				fmt.Fprintf(&b, "%s\n", x.Name)
			}
		}
		total, _ := h.TotalSlots()
		require.Equal(t, sum, total)
		again, err := ParseHostfile([]byte(b.String()))
		require.NoError(t, err, "re-parse of %q", b.String())
		require.Len(t, again.Hosts, len(h.Hosts))
		for i := range h.Hosts {
			require.Equal(t, h.Hosts[i].Name, again.Hosts[i].Name)
			require.Equal(t, h.Hosts[i].SlotsKnown, again.Hosts[i].SlotsKnown)
			if h.Hosts[i].SlotsKnown {
				require.Equal(t, h.Hosts[i].Slots, again.Hosts[i].Slots)
			}
		}
	})
}
