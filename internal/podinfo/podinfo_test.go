package podinfo

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// format writes annotations as the kubelet does (pkg/fieldpath FormatMap:
// sorted keys, key=%q per line).
func format(m map[string]string) []byte {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%q\n", k, m[k])
	}
	return []byte(b.String())
}

func TestParseKubeletFormat(t *testing.T) {
	in := map[string]string{
		"rankgate.io/bypass":                 "controller down, INC-4711",
		"kubectl.kubernetes.io/last-applied": "{\"a\":\"b=c\"}\n",
		"example.com/unicode":                "GPU 🚀 \t tab",
		"empty":                              "",
	}
	got, err := Parse(format(in))
	require.NoError(t, err)
	require.Equal(t, in, got)

	got, err = Parse(nil)
	require.NoError(t, err)
	require.Empty(t, got)

	for _, bad := range []string{"no-equals\n", "k=unquoted\n", "=\"v\"\n", "k=\"open\n"} {
		_, err := Parse([]byte(bad))
		require.Error(t, err, bad)
	}
}

func TestWatchSeesALateAnnotation(t *testing.T) {
	p := filepath.Join(t.TempDir(), "annotations")
	require.NoError(t, os.WriteFile(p, format(map[string]string{"a": "b"}), 0o600))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		time.Sleep(50 * time.Millisecond)
		tmp := p + ".tmp"
		_ = os.WriteFile(tmp, format(map[string]string{"a": "b", "rankgate.io/bypass": " why "}), 0o600)
		_ = os.Rename(tmp, p)
	}()
	require.Equal(t, "why", Watch(ctx, p, "rankgate.io/bypass", 10*time.Millisecond, nil))

	// A blank value is no bypass; the watch ends with its context.
	require.NoError(t, os.WriteFile(p, format(map[string]string{"rankgate.io/bypass": "  "}), 0o600))
	short, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	var errs int
	require.Equal(t, "", Watch(short, filepath.Join(t.TempDir(), "missing"), "rankgate.io/bypass", 10*time.Millisecond, func(error) { errs++ }))
	require.Positive(t, errs, "a missing file is told")
	short2, cancel3 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel3()
	require.Equal(t, "", Watch(short2, p, "rankgate.io/bypass", 10*time.Millisecond, nil))
}

func FuzzParse(f *testing.F) {
	f.Add(format(map[string]string{"rankgate.io/bypass": "x", "a": "\"q\""}))
	f.Add([]byte("k=\"\\u00e9\"\n\n"))
	f.Add([]byte("k=`raw`\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Parse(data)
		if err != nil {
			return
		}
		// What parses round-trips through the kubelet's format.
		again, err := Parse(format(m))
		require.NoError(t, err)
		require.Equal(t, m, again)
	})
}
