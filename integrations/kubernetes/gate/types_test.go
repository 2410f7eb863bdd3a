package gate

import (
	"net/http"
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
