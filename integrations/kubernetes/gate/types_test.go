package gate

import (
	"net/http"
	"strings"
	"testing"

	"github.com/rankgate/rankgate/verdict"
	"github.com/stretchr/testify/require"
)

func TestErrorCodes(t *testing.T) {
	for code, status := range map[string]int{
		CodeBadRequest: http.StatusBadRequest, CodeUnauthenticated: http.StatusUnauthorized, CodeForbidden: http.StatusForbidden,
		CodeNotARank: http.StatusUnprocessableEntity, CodeNotOptedIn: http.StatusUnprocessableEntity,
		CodeNotLeader: http.StatusServiceUnavailable, CodeUnavailable: http.StatusServiceUnavailable,
	} {
		e := Errorf(code, "x")
		require.Equal(t, status, e.HTTPStatus, code)
		require.Equal(t, status == http.StatusServiceUnavailable, e.Retryable(), code)
		require.Equal(t, !e.Retryable(), IsPermanent(e), code)
	}
}

func TestValidate(t *testing.T) {
	ok := ReportRequest{APIVersion: APIVersion, Namespace: "ml", Pod: "p", Report: verdict.NewReport("", nil)}
	require.NoError(t, ok.Validate())
	for name, mutate := range map[string]func(*ReportRequest){
		"version": func(r *ReportRequest) { r.APIVersion = "v0" },
		"pod":     func(r *ReportRequest) { r.Pod = "" },
		"verdict": func(r *ReportRequest) { r.Report.Verdict = "maybe" },
	} {
		r := ok
		mutate(&r)
		require.Error(t, r.Validate(), name)
	}
	_, err := NewClient(ClientOptions{URL: "ftp://x", Token: "t"})
	require.Error(t, err)
	_, err = NewClient(ClientOptions{URL: "https://x:1"})
	require.ErrorContains(t, err, "token")
}

// The report's network is optional and bounded: absent it is unknown
// (nil), present it may list at most MaxNetInterfaces interfaces and
// MaxNetHCAs HCAs of 1 to MaxNetNameLen bytes.
func TestValidateNet(t *testing.T) {
	names := func(n, size int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = strings.Repeat("x", size-1) + string(rune('a'+i%26))
		}
		return out
	}
	base := ReportRequest{APIVersion: APIVersion, Namespace: "ml", Pod: "p", Report: verdict.NewReport("", nil)}
	require.NoError(t, base.Validate(), "no net: unknown, accepted")
	for _, tc := range []struct {
		name string
		net  *RankNet
		ncv  string
		want string
	}{
		{"at the bounds", &RankNet{Interfaces: names(MaxNetInterfaces, MaxNetNameLen), HCAs: names(MaxNetHCAs, MaxNetNameLen), HCAsKnown: true}, "2.27.3", ""},
		{"no interfaces, HCAs unknown", &RankNet{}, "", ""},
		{"too many interfaces", &RankNet{Interfaces: names(MaxNetInterfaces+1, 4)}, "", "net.interfaces: 257 entries exceed the limit of 256"},
		{"too many HCAs", &RankNet{Interfaces: []string{"eth0"}, HCAs: names(MaxNetHCAs+1, 6)}, "", "net.hcas: 65 entries exceed the limit of 64"},
		{"interface name too long", &RankNet{Interfaces: names(1, MaxNetNameLen+1)}, "", "net.interfaces[0]: 65 bytes"},
		{"empty HCA name", &RankNet{Interfaces: []string{"eth0"}, HCAs: []string{""}}, "", "net.hcas[0]: 0 bytes"},
		{"NCCL version too long", nil, strings.Repeat("2", MaxNameLen+1), "ncclVersion"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := base
			r.Net, r.NCCLVersion = tc.net, tc.ncv
			err := r.Validate()
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
}
