package smi

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// queryXML100KB builds a ~100 KB `nvidia-smi -q -x` document: the <gpu>
// element of fixture 32 (an A100 with two MIG devices) repeated with its
// own bus ID and UUID per GPU, as an 8-GPU node's output would be.
func queryXML100KB(t testing.TB) []byte {
	t.Helper()
	src := string(load(t, sharedDir, "32_smi-q-x_a100-sxm4-40gb_mig-2x3g.20gb_510.47.03_netdata.xml").Data)
	start := strings.Index(src, "    <gpu id=")
	end := strings.Index(src, "</gpu>") + len("</gpu>\n")
	require.True(t, start > 0 && end > start)
	head, gpu, tail := src[:start], src[start:end], src[end:]
	var b strings.Builder
	b.WriteString(head)
	for i := 0; b.Len() < 100<<10; i++ {
		g := strings.ReplaceAll(gpu, "00000000:00:04.0", fmt.Sprintf("00000000:%02X:00.0", 0x10+i))
		g = strings.ReplaceAll(g, "GPU-27b94a00-ed54-5c24-b1fd-1054085de32a", fmt.Sprintf("GPU-27b94a00-ed54-5c24-b1fd-%012x", i))
		b.WriteString(g)
	}
	b.WriteString(tail)
	return []byte(b.String())
}

func TestQueryXML100KB(t *testing.T) {
	data := queryXML100KB(t)
	require.GreaterOrEqual(t, len(data), 100<<10)
	inv := importOK(t, Input{Name: "q.xml", Data: data})
	require.Len(t, inv.GPUs, 6)
	for _, g := range inv.GPUs {
		require.Equal(t, []string{"3g.20gb", "3g.20gb"}, profiles(&g))
	}
}

// BenchmarkImportQueryXML100KB must stay under 10 ms/op: `rankgate
// preflight` imports pasted outputs interactively.
func BenchmarkImportQueryXML100KB(b *testing.B) {
	data := queryXML100KB(b)
	in := []Input{{Name: "q.xml", Data: data}}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Import(in, fuzzCatalog); err != nil {
			b.Fatal(err)
		}
	}
}
