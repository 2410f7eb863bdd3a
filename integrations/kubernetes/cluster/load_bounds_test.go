package cluster

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/internal/fileinput"
)

func TestLoadFileRefusesWhatIsNotARegularFile(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "dump.yaml")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	for _, p := range []string{fifo, "/dev/zero", filepath.Dir(fifo)} {
		done := make(chan error, 1)
		go func() { done <- LoadFile(context.Background(), NewBuilder(), p, strings.NewReader(""), nil) }()
		select {
		case err := <-done:
			require.ErrorIs(t, err, fileinput.ErrNotRegular)
			require.Contains(t, err.Error(), p+": not a regular file")
		case <-time.After(5 * time.Second):
			t.Fatalf("LoadFile(%s) blocked", p)
		}
	}
}

func TestLoadFileStdin(t *testing.T) {
	b := NewBuilder()
	require.NoError(t, LoadFile(context.Background(), b, "-", strings.NewReader(multiDoc), nil))
	require.NotEmpty(t, b.Nodes())
}

// A file over the bound fails as too large, not as broken YAML or JSON,
// whichever decoder was reading it.
func TestLoadStopsAtTheBound(t *testing.T) {
	jsonList := `{"apiVersion": "v1", "kind": "List", "items": [` + strings.Repeat(`{"apiVersion": "v1", "kind": "ConfigMap"},`, 4000)
	for name, in := range map[string]string{
		"yaml line without end": strings.Repeat("a", 1<<20),
		"zero bytes":            string(make([]byte, 1<<20)),
		"yaml documents":        strings.Repeat("apiVersion: v1\nkind: ConfigMap\n---\n", 10000),
		"json list":             jsonList,
	} {
		t.Run(name, func(t *testing.T) {
			r, err := fileinput.Open(context.Background(), "-", bytes.NewReader([]byte(in)), 64<<10)
			require.NoError(t, err)
			err = Load(NewBuilder(), "(stdin)", r, nil)
			require.ErrorIs(t, err, fileinput.ErrTooLarge)
			require.Equal(t, "standard input: larger than 64 KiB, the most rankgate reads from this input", err.Error())
		})
	}
}

func TestLoadFileTooLarge(t *testing.T) {
	p := filepath.Join(t.TempDir(), "dump.yaml")
	f, err := os.Create(p)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(MaxDumpSize+1))
	require.NoError(t, f.Close())
	err = LoadFile(context.Background(), NewBuilder(), p, nil, nil)
	require.ErrorIs(t, err, fileinput.ErrTooLarge)
	require.Contains(t, err.Error(), p+": larger than "+fileinput.Size(MaxDumpSize))
}
