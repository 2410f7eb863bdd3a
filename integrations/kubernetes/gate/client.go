package gate

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/rankgate/rankgate/internal/fileinput"
	"github.com/rankgate/rankgate/verdict"
)

// ClientOptions configure a Client.
type ClientOptions struct {
	// URL of the gate, e.g. https://rankgate-gate.rankgate-system.svc:443.
	URL string
	// CAFile holds the PEM CA that signed the gate's certificate; empty
	// uses the system roots.
	CAFile string
	// TokenFile holds the projected service-account token (audience
	// rankgate). It is read again for every request: the kubelet rotates it.
	TokenFile string
	// Token is used when TokenFile is empty (tests, other embedders).
	Token string
	// Transport replaces the default one (tests).
	Transport http.RoundTripper
}

// Client talks to the gate.
type Client struct {
	base      *url.URL
	http      *http.Client
	tokenFile string
	token     string
}

// Bounds on the client's files: a projected service-account token is
// about 1 KiB; a CA bundle (the whole Mozilla set) about 220 KiB.
const (
	MaxTokenFileSize = 64 << 10
	MaxCAFileSize    = 1 << 20
)

// NewClient checks the options and builds a client. Its errors are
// *ClientError.
func NewClient(o ClientOptions) (*Client, error) {
	c, err := newClient(o)
	if err != nil {
		return nil, &ClientError{Err: err}
	}
	return c, nil
}

// ClientError: the client cannot be built (URL, CA file, token): the rank's
// environment is wrong, exit 3.
type ClientError struct{ Err error }

func (e *ClientError) Error() string { return e.Err.Error() }
func (e *ClientError) Unwrap() error { return e.Err }

// ExitCode is 3.
func (e *ClientError) ExitCode() int { return verdict.ExitEnvironment }

func newClient(o ClientOptions) (*Client, error) {
	u, err := url.Parse(o.URL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("gate URL %q: want https://host:port", o.URL)
	}
	rt := o.Transport
	if rt == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		if o.CAFile != "" {
			pem, err := fileinput.ReadFile(context.Background(), o.CAFile, nil, MaxCAFileSize)
			if err != nil {
				return nil, fmt.Errorf("gate CA file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("gate CA file %s: no PEM certificate in it", o.CAFile)
			}
			tr.TLSClientConfig.RootCAs = pool
		}
		tr.ForceAttemptHTTP2 = true
		rt = tr
	}
	if o.TokenFile == "" && o.Token == "" {
		return nil, errors.New("gate client: a token file is required (projected service-account token, audience rankgate)")
	}
	return &Client{base: u, http: &http.Client{Transport: rt}, tokenFile: o.TokenFile, token: o.Token}, nil
}

func (c *Client) bearer(ctx context.Context) (string, error) {
	if c.tokenFile == "" {
		return c.token, nil
	}
	b, err := fileinput.ReadFile(ctx, c.tokenFile, nil, MaxTokenFileSize)
	if err != nil {
		return "", &permanentError{fmt.Errorf("reading token file: %w", err)}
	}
	return strings.TrimSpace(string(b)), nil
}

// Report sends req and waits up to wait for the verdict.
func (c *Client) Report(ctx context.Context, req *ReportRequest, wait time.Duration) (*Response, error) {
	if req.APIVersion == "" {
		req.APIVersion = APIVersion
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	return c.do(ctx, http.MethodPost, PathReport, url.Values{"wait": {wait.String()}}, body, wait)
}

// Verdict waits up to wait for the verdict of the pod's job.
func (c *Client) Verdict(ctx context.Context, namespace, pod string, wait time.Duration) (*Response, error) {
	q := url.Values{"wait": {wait.String()}, "namespace": {namespace}, "pod": {pod}}
	return c.do(ctx, http.MethodGet, PathVerdict, q, nil, wait)
}

func (c *Client) do(ctx context.Context, method, path string, q url.Values, body []byte, wait time.Duration) (*Response, error) {
	token, err := c.bearer(ctx)
	if err != nil {
		return nil, err
	}
	// The server answers by wait; allow for a slow network on top.
	ctx, cancel := context.WithTimeout(ctx, wait+20*time.Second)
	defer cancel()
	u := *c.base
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	u.RawQuery = q.Encode()
	hr, err := http.NewRequestWithContext(ctx, method, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hr.Header.Set("Authorization", "Bearer "+token)
	hr.Header.Set("Content-Type", "application/json")
	res, err := c.http.Do(hr)
	if err != nil {
		var cv *tls.CertificateVerificationError
		if errors.As(err, &cv) {
			return nil, &permanentError{fmt.Errorf("the gate's TLS certificate is not trusted (check --ca-file): %w", err)}
		}
		return nil, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, MaxBody))
	if err != nil {
		return nil, err
	}
	if res.StatusCode != http.StatusOK {
		var eb ErrorBody
		if json.Unmarshal(data, &eb) != nil || eb.Code == "" {
			eb = ErrorBody{Code: CodeUnavailable, Message: fmt.Sprintf("HTTP %d: %s", res.StatusCode, firstLine(data))}
		}
		e := &Error{HTTPStatus: res.StatusCode, Code: eb.Code, Message: eb.Message}
		if s, err := strconv.Atoi(res.Header.Get("Retry-After")); err == nil {
			e.RetryAfter = time.Duration(s) * time.Second
		}
		return nil, e
	}
	var r Response
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("decoding gate answer: %w", err)
	}
	if r.APIVersion != APIVersion {
		return nil, &permanentError{fmt.Errorf("gate answered apiVersion %q, this client speaks %q", r.APIVersion, APIVersion)}
	}
	return &r, nil
}

func firstLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}

// permanentError is a client-side failure that retrying cannot fix.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// ExitCode: a client-side misconfiguration (CA, token file) is an
// environment failure, exit 3.
func (e *permanentError) ExitCode() int { return verdict.ExitEnvironment }

// IsPermanent reports whether err will not go away by retrying: a refusal
// by the gate (bad request, bad token, not a rank, not opted in) or a
// client-side misconfiguration (CA, token file).
func IsPermanent(err error) bool {
	var pe *permanentError
	if errors.As(err, &pe) {
		return true
	}
	var ge *Error
	return errors.As(err, &ge) && !ge.Retryable()
}

// AwaitOptions tune Await.
type AwaitOptions struct {
	// Poll is the long-poll wait of each request (default 30s).
	Poll time.Duration
	// MinBackoff and MaxBackoff bound the delay between attempts after a
	// failure (defaults 250ms and 5s); it doubles, with jitter.
	MinBackoff, MaxBackoff time.Duration
	// OnRetry is told about each failed attempt and the delay before the
	// next one.
	OnRetry func(err error, delay time.Duration)
	// OnWaiting is told about each "waiting" answer.
	OnWaiting func(r *Response)
}

// Await reports req and polls until the gang is decided, re-sending the
// report on every poll (so a restarted controller learns it again) and
// retrying, with backoff, while the gate is unreachable or not ready. It
// returns the decided response, or the last error when ctx ends or the gate
// refuses the request for good (IsPermanent).
func (c *Client) Await(ctx context.Context, req *ReportRequest, o AwaitOptions) (*Response, error) {
	return c.await(ctx, o, func(ctx context.Context, wait time.Duration) (*Response, error) {
		return c.Report(ctx, req, wait)
	})
}

// AwaitVerdict polls the verdict of the pod's job until it is decided,
// without reporting: a pod that waits for the gang but runs no rank (an
// MPIJob launcher behind `rankgate launch --gang`). Retries, backoff and
// errors are Await's.
func (c *Client) AwaitVerdict(ctx context.Context, namespace, pod string, o AwaitOptions) (*Response, error) {
	return c.await(ctx, o, func(ctx context.Context, wait time.Duration) (*Response, error) {
		return c.Verdict(ctx, namespace, pod, wait)
	})
}

// await calls poll until the gang is decided (see Await).
func (c *Client) await(ctx context.Context, o AwaitOptions, poll func(ctx context.Context, wait time.Duration) (*Response, error)) (*Response, error) {
	if o.Poll <= 0 {
		o.Poll = 30 * time.Second
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = 250 * time.Millisecond
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = max(5*time.Second, o.MinBackoff)
	}
	backoff := o.backoff()
	var last error
	for {
		wait := o.Poll
		if dl, ok := ctx.Deadline(); ok {
			wait = max(0, min(wait, time.Until(dl)-time.Second))
		}
		sent := time.Now()
		r, err := poll(ctx, wait)
		if err == nil {
			if r.State == StateDecided && r.Verdict != nil {
				return r, nil
			}
			if o.OnWaiting != nil {
				o.OnWaiting(r)
			}
			backoff = o.backoff()
			last = nil
			if ctx.Err() != nil {
				return r, ctx.Err()
			}
			if time.Since(sent) < 50*time.Millisecond {
				// The server did not hold the poll (no wait left): do not spin.
				sleep(ctx, o.MinBackoff)
			}
			continue
		}
		if ctx.Err() != nil {
			if last == nil {
				last = err
			}
			return nil, errors.Join(ctx.Err(), last)
		}
		if IsPermanent(err) {
			return nil, err
		}
		last = err
		delay := backoff.Step()
		var ge *Error
		if errors.As(err, &ge) && ge.RetryAfter > 0 && ge.Code != CodeNotLeader {
			delay = max(delay, min(ge.RetryAfter, o.MaxBackoff))
		}
		if ge != nil && ge.Code == CodeNotLeader {
			// Reached a standby replica: retry on a new connection, which
			// the Service may send to the leader.
			c.http.CloseIdleConnections()
		}
		if o.OnRetry != nil {
			o.OnRetry(err, delay)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, errors.Join(ctx.Err(), last)
		case <-t.C:
		}
	}
}

// backoff is the delay between failed attempts: it starts at MinBackoff
// and doubles up to MaxBackoff, each delay drawn from its upper half (half
// the base plus a jitter of up to as much again), so that ranks which
// failed together do not retry together.
func (o AwaitOptions) backoff() wait.Backoff {
	return wait.Backoff{Duration: o.MinBackoff / 2, Factor: 2, Jitter: 1, Steps: math.MaxInt32, Cap: o.MaxBackoff / 2}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
