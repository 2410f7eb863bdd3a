package cpupin

import (
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseList(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
	}{
		{"0", []int{0}},
		{"0-7", []int{0, 1, 2, 3, 4, 5, 6, 7}},
		{"8,10-11", []int{8, 10, 11}},
		{"13-15,0,2-3", []int{0, 2, 3, 13, 14, 15}},
		{"1,1,0-1", []int{0, 1}},
		{"\t0-1\n", []int{0, 1}}, // as /proc/PID/status writes it
		{"5-5", []int{5}},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseList(tc.in)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
	for _, bad := range []string{"", " ", "a", "1-", "-1", "7-0", "0,,1", "0-1-2", "+1", "1 ,2", "8192", "0-9999999999"} {
		t.Run("bad "+bad, func(t *testing.T) {
			_, err := ParseList(bad)
			require.Error(t, err)
		})
	}
}

func TestFormatList(t *testing.T) {
	for in, want := range map[string]string{"0": "0", "0-7": "0-7", "0,1,2,4": "0-2,4", "8,10-11": "8,10-11", "1,3,5": "1,3,5"} {
		cpus, err := ParseList(in)
		require.NoError(t, err)
		require.Equal(t, want, FormatList(cpus))
	}
	require.Empty(t, FormatList(nil))
}

func FuzzParseList(f *testing.F) {
	for _, s := range []string{"0", "0-7", "8,10-11", "1,1", "7-0", "", "0-8191", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cpus, err := ParseList(s)
		if err != nil {
			return
		}
		require.NotEmpty(t, cpus)
		require.True(t, slices.IsSorted(cpus))
		require.Equal(t, cpus, slices.Compact(slices.Clone(cpus)))
		require.GreaterOrEqual(t, cpus[0], 0)
		require.LessOrEqual(t, cpus[len(cpus)-1], MaxCPU)
		again, err := ParseList(FormatList(cpus))
		require.NoError(t, err)
		require.Equal(t, cpus, again)
	})
}

// startPinned starts `sleep 30` on CPUs list and returns its pid; the
// process is killed when the test ends.
func startPinned(t *testing.T, list string) int {
	t.Helper()
	if _, err := exec.LookPath("taskset"); err != nil {
		t.Skip("taskset (util-linux) not installed")
	}
	cmd, err := Command(list, "sleep", "30")
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd.Process.Pid
}

// A child started through Command runs on the CPUs asked for, and Check
// and Children see it. taskset sets the affinity and then execs sleep, so
// the affinity is read back once the child is sleep.
func TestCommandPinsChild(t *testing.T) {
	mine, err := Allowed(os.Getpid())
	require.NoError(t, err)
	for _, list := range []string{FormatList(mine[:1]), FormatList(mine[len(mine)-1:]), FormatList(mine)} {
		t.Run(list, func(t *testing.T) {
			pid := startPinned(t, list)
			require.Eventually(t, func() bool {
				kids, err := Children(os.Getpid())
				return err == nil && slices.Contains(kids["sleep"], pid)
			}, 5*time.Second, 10*time.Millisecond, "the child never became sleep")
			require.NoError(t, Check(pid, list))
		})
	}
	if len(mine) > 1 {
		pid := startPinned(t, FormatList(mine[:1]))
		require.Eventually(t, func() bool {
			kids, _ := Children(os.Getpid())
			return slices.Contains(kids["sleep"], pid)
		}, 5*time.Second, 10*time.Millisecond)
		require.ErrorContains(t, Check(pid, FormatList(mine)), "not "+FormatList(mine))
	}
}

func TestCommandWithoutListIsPlain(t *testing.T) {
	cmd, err := Command("", "sleep", "1")
	require.NoError(t, err)
	require.Equal(t, []string{"sleep", "1"}, cmd.Args)
	_, err = Command("0-", "sleep", "1")
	require.Error(t, err)
}

func TestAllowedOfMissingProcess(t *testing.T) {
	_, err := Allowed(-1)
	require.Error(t, err)
}
