package fileformat

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCheck(t *testing.T) {
	f := Format{APIVersion: "rankgate.io/v1", Kind: "Widget", LegacyVersion: "rankgate.io/v1"}
	noLegacy := f
	noLegacy.LegacyVersion = ""
	for _, tc := range []struct {
		name    string
		f       Format
		h       Header
		wantErr string
	}{
		{"new form", f, Header{APIVersion: "rankgate.io/v1", Kind: "Widget"}, ""},
		{"old form", f, Header{Version: "rankgate.io/v1"}, ""},
		{"old form, format without one", noLegacy, Header{Version: "rankgate.io/v1"}, `version "rankgate.io/v1" is not supported (want apiVersion: rankgate.io/v1 and kind: Widget)`},
		{"old form, other version", f, Header{Version: "v1"}, `version "v1" is not supported`},
		{"both", f, Header{APIVersion: "rankgate.io/v1", Kind: "Widget", Version: "rankgate.io/v1"}, "both version (the old form) and apiVersion/kind"},
		{"old version and kind", f, Header{Kind: "Widget", Version: "rankgate.io/v1"}, "both version"},
		{"wrong kind", f, Header{APIVersion: "rankgate.io/v1", Kind: "Gadget"}, "the file has kind Gadget, not Widget"},
		{"wrong kind and apiVersion", f, Header{APIVersion: "example.com/v9", Kind: "Gadget"}, "the file has kind Gadget, not Widget"},
		{"kind is case-sensitive", f, Header{APIVersion: "rankgate.io/v1", Kind: "widget"}, "the file has kind widget, not Widget"},
		{"unknown apiVersion", f, Header{APIVersion: "rankgate.io/v2", Kind: "Widget"}, `apiVersion "rankgate.io/v2" is not supported by this build (want apiVersion: rankgate.io/v1)`},
		{"missing apiVersion", f, Header{Kind: "Widget"}, "missing apiVersion (want apiVersion: rankgate.io/v1)"},
		{"missing kind", f, Header{APIVersion: "rankgate.io/v1"}, "missing kind (want kind: Widget)"},
		{"empty", f, Header{}, "missing apiVersion and kind (want apiVersion: rankgate.io/v1 and kind: Widget)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.f.Check(tc.h)
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

func TestPeek(t *testing.T) {
	h, ok := PeekJSON([]byte(`{"apiVersion":"a/v1","kind":"K","gpus":[1,2],"other":{}}`))
	require.True(t, ok)
	require.Equal(t, Header{APIVersion: "a/v1", Kind: "K"}, h)
	h, ok = PeekYAML([]byte("# comment\nversion: a/v1\nmodels:\n- x: 1\n"))
	require.True(t, ok)
	require.Equal(t, Header{Version: "a/v1"}, h)
	for _, bad := range []string{`{`, `[]`, `{"kind": 3}`} {
		_, ok = PeekJSON([]byte(bad))
		require.False(t, ok, bad)
	}
	_, ok = PeekYAML([]byte("kind: [\n"))
	require.False(t, ok)
}
