package certs

import (
	"crypto/x509"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// verifies: the serving certificate chains to a CA in pool.
func verifies(t *testing.T, b *Bundle, pool []byte, at time.Time) bool {
	t.Helper()
	p := x509.NewCertPool()
	require.True(t, p.AppendCertsFromPEM(pool))
	_, err := b.serving.cert.Verify(x509.VerifyOptions{Roots: p, DNSName: "rankgate-gate.ns.svc", CurrentTime: at})
	return err == nil
}

// Through several CA and serving-certificate rotations, a client that read
// the bundle at any earlier check still trusts the serving certificate as
// long as it re-reads the bundle once per Lookahead.
func TestRenewRotatesWithoutBreakingClients(t *testing.T) {
	d := Durations{CA: 10 * time.Hour, Cert: 3 * time.Hour, Lookahead: time.Hour}
	dns := []string{"rankgate-gate.ns.svc"}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	b, changed, err := Renew(nil, dns, d, now)
	require.NoError(t, err)
	require.True(t, changed)
	require.True(t, verifies(t, b, b.CAPEM(), now))

	cas, servings := map[string]bool{b.SignerSerial(): true}, map[string]bool{b.ServingSerial(): true}
	prevBundle := b.CAPEM()
	for step := 1; step <= 30*6; step++ { // 30 hours in 10-minute checks
		at := now.Add(time.Duration(step) * 10 * time.Minute)
		nb, _, err := Renew(mustBundle(t)(Parse(b.Data())), dns, d, at)
		require.NoError(t, err)
		require.True(t, verifies(t, nb, nb.CAPEM(), at), "step %d: own bundle", step)
		require.True(t, verifies(t, nb, prevBundle, at), "step %d: a client holding the bundle from 10 minutes ago", step)
		cas[nb.SignerSerial()], servings[nb.ServingSerial()] = true, true
		prevBundle, b = nb.CAPEM(), nb
	}
	require.GreaterOrEqual(t, len(cas), 3, "CA rotations")
	require.GreaterOrEqual(t, len(servings), 10, "serving-certificate rotations")

	// Nothing due: nothing changes.
	_, changed, err = Renew(b, dns, d, now.Add(30*time.Hour+time.Second))
	require.NoError(t, err)
	require.False(t, changed)
	// A new DNS name: a new serving certificate, same CA.
	nb, changed, err := Renew(b, append(dns, "x.ns.svc"), d, now.Add(30*time.Hour))
	require.NoError(t, err)
	require.True(t, changed)
	require.Equal(t, b.SignerSerial(), nb.SignerSerial())
}

func mustBundle(t *testing.T) func(*Bundle, error) *Bundle {
	return func(b *Bundle, err error) *Bundle {
		t.Helper()
		require.NoError(t, err)
		return b
	}
}

func TestParseRefusesDamage(t *testing.T) {
	b, _, err := Renew(nil, []string{"a"}, DefaultDurations, time.Now())
	require.NoError(t, err)
	d := b.Data()
	d[KeyKey] = d[KeyCAKey] // a key that is not the certificate's
	_, err = Parse(d)
	require.Error(t, err)
	_, err = Parse(map[string][]byte{})
	require.Error(t, err)
}
