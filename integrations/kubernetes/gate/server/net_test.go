package server_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate/server"
)

// A report's network is optional: a body without it (an older rankgate
// init) decodes with the network unknown (nil), one with it keeps the
// lists (cleaned); one beyond the bounds is refused with BadRequest.
func TestDecodeReportNet(t *testing.T) {
	body := func(extra string) []byte {
		return []byte(`{"apiVersion":"gate.rankgate.io/v1","namespace":"ml","pod":"p0",` + extra + `"report":{"verdict":"pass","findings":[]}}`)
	}
	ifs := func(n int) string {
		l := make([]string, n)
		for i := range l {
			l[i] = fmt.Sprintf("%q", fmt.Sprintf("veth%d", i))
		}
		return strings.Join(l, ",")
	}

	old, err := server.DecodeReport(body(""))
	require.NoError(t, err)
	require.Nil(t, old.Net, "absent: unknown, not an empty network")
	require.Empty(t, old.NCCLVersion)

	got, err := server.DecodeReport(body(`"net":{"interfaces":["eth0","lo","net1\u001b[2J"],"hcas":["mlx5_0"],"hcasKnown":true},"ncclVersion":"2.27.3",`))
	require.NoError(t, err)
	require.Equal(t, &gate.RankNet{Interfaces: []string{"eth0", "lo", "net1[2J"}, HCAs: []string{"mlx5_0"}, HCAsKnown: true}, got.Net)
	require.Equal(t, "2.27.3", got.NCCLVersion)

	none, err := server.DecodeReport(body(`"net":{"interfaces":["lo"],"hcasKnown":true},`))
	require.NoError(t, err)
	require.Equal(t, &gate.RankNet{Interfaces: []string{"lo"}, HCAsKnown: true}, none.Net)

	for name, tc := range map[string]struct{ extra, want string }{
		"interfaces over the bound":       {`"net":{"interfaces":[` + ifs(gate.MaxNetInterfaces+1) + `]},`, "net.interfaces: 257 entries"},
		"interfaces over the shape bound": {`"net":{"interfaces":[` + ifs(600) + `]},`, "a list has more than"},
		"a name too long":                 {`"net":{"interfaces":["` + strings.Repeat("e", gate.MaxNetNameLen+1) + `"]},`, "net.interfaces[0]"},
		"not a list":                      {`"net":{"interfaces":"eth0"},`, "decoding report"},
	} {
		_, err := server.DecodeReport(body(tc.extra))
		require.Error(t, err, name)
		require.Equal(t, gate.CodeBadRequest, err.(*gate.Error).Code, name)
		require.ErrorContains(t, err, tc.want, name)
	}
}
