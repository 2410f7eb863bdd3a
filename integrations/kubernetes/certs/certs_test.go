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
	b, changed, err := Renew(nil, dns, d, now, "")
	require.NoError(t, err)
	require.True(t, changed)
	require.True(t, verifies(t, b, b.CAPEM(), now))

	cas, servings := map[string]bool{b.SignerSerial(): true}, map[string]bool{b.ServingSerial(): true}
	prevBundle := b.CAPEM()
	for step := 1; step <= 30*6; step++ { // 30 hours in 10-minute checks
		at := now.Add(time.Duration(step) * 10 * time.Minute)
		// The copies clients read were confirmed to hold the bundle of
		// the previous check.
		nb, _, err := Renew(mustBundle(t)(Parse(b.Data())), dns, d, at, CAHash(prevBundle))
		require.NoError(t, err)
		require.True(t, verifies(t, nb, nb.CAPEM(), at), "step %d: own bundle", step)
		require.True(t, verifies(t, nb, prevBundle, at), "step %d: a client holding the bundle from 10 minutes ago", step)
		cas[nb.SignerSerial()], servings[nb.ServingSerial()] = true, true
		prevBundle, b = nb.CAPEM(), nb
	}
	require.GreaterOrEqual(t, len(cas), 3, "CA rotations")
	require.GreaterOrEqual(t, len(servings), 10, "serving-certificate rotations")

	// Nothing due: nothing changes.
	_, changed, err = Renew(b, dns, d, now.Add(30*time.Hour+time.Second), CAHash(b.CAPEM()))
	require.NoError(t, err)
	require.False(t, changed)
	// A new DNS name: a new serving certificate, same CA.
	nb, changed, err := Renew(b, append(dns, "x.ns.svc"), d, now.Add(30*time.Hour), CAHash(b.CAPEM()))
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
	b, _, err := Renew(nil, []string{"a"}, DefaultDurations, time.Now(), "")
	require.NoError(t, err)
	d := b.Data()
	d[KeyKey] = d[KeyCAKey] // a key that is not the certificate's
	_, err = Parse(d)
	require.Error(t, err)
	_, err = Parse(map[string][]byte{})
	require.Error(t, err)
}

// The next CA signs only once the copies clients read are confirmed to
// hold it; unconfirmed, it waits until half a Lookahead before the
// signer ends, and the waiting costs no new serving certificate per check.
func TestNextCASignsOnlyOncePublished(t *testing.T) {
	d := Durations{CA: 10 * time.Hour, Cert: 3 * time.Hour, Lookahead: time.Hour}
	dns := []string{"rankgate-gate.ns.svc"}
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	b, _, err := Renew(nil, dns, d, start, "")
	require.NoError(t, err)
	old := b.CAPEM() // what a client holds before the next CA exists
	signer := b.SignerSerial()
	end := start.Add(d.CA)

	// Two Lookaheads before the end: the next CA joins the bundle.
	b, changed, err := Renew(b, dns, d, end.Add(-2*d.Lookahead+time.Minute), CAHash(old))
	require.NoError(t, err)
	require.True(t, changed)
	require.NotNil(t, b.next)
	withNext := b.CAPEM()

	// Past one Lookahead, the copies still hold the old bundle: no switch,
	// and a client with the old bundle still trusts the gate.
	at := end.Add(-d.Lookahead + time.Minute)
	b, _, err = Renew(b, dns, d, at, CAHash(old))
	require.NoError(t, err)
	require.Equal(t, signer, b.SignerSerial())
	require.True(t, verifies(t, b, old, at))
	serving := b.ServingSerial()
	for m := 10; m < 30; m += 10 {
		b, changed, err = Renew(b, dns, d, at.Add(time.Duration(m)*time.Minute), CAHash(old))
		require.NoError(t, err)
		require.False(t, changed, "waiting for the copies: nothing to renew at +%d min", m)
	}
	require.Equal(t, serving, b.ServingSerial())

	// Confirmed: the next CA signs.
	confirmed, _, err := Renew(mustBundle(t)(Parse(b.Data())), dns, d, at.Add(20*time.Minute), CAHash(withNext))
	require.NoError(t, err)
	require.NotEqual(t, signer, confirmed.SignerSerial())
	require.True(t, verifies(t, confirmed, withNext, at.Add(20*time.Minute)))

	// Never confirmed: it signs anyway half a Lookahead before the end.
	forced, _, err := Renew(b, dns, d, end.Add(-d.Lookahead/2+time.Minute), CAHash(old))
	require.NoError(t, err)
	require.NotEqual(t, signer, forced.SignerSerial())
}
