package launcher

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"sort"
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Resolver looks host names up; *net.Resolver is one. Tests inject a map.
type Resolver interface {
	LookupHost(ctx context.Context, host string) ([]string, error)
}

// Dialer opens TCP connections; *net.Dialer is one.
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// hostFailure is a host that never became reachable.
type hostFailure struct {
	host  string
	stage string // "resolve" or "connect"
	err   error
}

func (f hostFailure) String() string {
	if f.stage == "resolve" {
		return fmt.Sprintf("%s does not resolve (%v)", f.host, f.err)
	}
	return fmt.Sprintf("%s refuses or drops TCP (%v)", f.host, f.err)
}

// hostCheckParallel bounds the hosts probed at once.
const hostCheckParallel = 64

// waitHosts waits until every host resolves and accepts a TCP connection
// on port, retrying (workers' sshd may still be starting, their DNS records
// not yet published) until ctx ends. It returns the hosts that never did.
func waitHosts(ctx context.Context, hosts []string, port int, r Resolver, d Dialer) []hostFailure {
	var (
		mu    sync.Mutex
		fails []hostFailure
		wg    sync.WaitGroup
		sem   = make(chan struct{}, hostCheckParallel)
	)
	for _, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				mu.Lock()
				fails = append(fails, hostFailure{host: h, stage: "connect", err: ctx.Err()})
				mu.Unlock()
				return
			}
			defer func() { <-sem }()
			if f, ok := waitHost(ctx, h, port, r, d); !ok {
				mu.Lock()
				fails = append(fails, f)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	sortFailures(fails, hosts)
	return fails
}

func waitHost(ctx context.Context, host string, port int, r Resolver, d Dialer) (hostFailure, bool) {
	backoff := hostProbeBackoff
	last := hostFailure{host: host, stage: "connect", err: context.DeadlineExceeded}
	for {
		if f, ok := probeHost(ctx, host, port, r, d); ok {
			return hostFailure{}, true
		} else if f.err != nil && !(ctx.Err() != nil && errors.Is(f.err, ctx.Err())) {
			last = f // keep the last real error, not the deadline's
		}
		t := time.NewTimer(backoff.Step())
		select {
		case <-ctx.Done():
			t.Stop()
			return last, false
		case <-t.C:
		}
	}
}

// hostProbeBackoff spaces the probes of one host: 50ms, doubling, at most
// a second. Steps only bounds the doubling; the context ends the wait.
var hostProbeBackoff = wait.Backoff{Duration: 50 * time.Millisecond, Factor: 2, Steps: math.MaxInt32, Cap: time.Second}

// probeHost makes one attempt: resolve (unless host is an address), then
// connect to each address until one accepts.
func probeHost(ctx context.Context, host string, port int, r Resolver, d Dialer) (hostFailure, bool) {
	addrs := []string{host}
	if net.ParseIP(host) == nil {
		var err error
		addrs, err = r.LookupHost(ctx, host)
		if err != nil {
			return hostFailure{host: host, stage: "resolve", err: err}, false
		}
		if len(addrs) == 0 {
			return hostFailure{host: host, stage: "resolve", err: errors.New("no addresses")}, false
		}
	}
	var lastErr error
	for _, a := range addrs {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		c, err := d.DialContext(actx, "tcp", net.JoinHostPort(a, strconv.Itoa(port)))
		cancel()
		if err == nil {
			_ = c.Close()
			return hostFailure{}, true
		}
		lastErr = err
	}
	return hostFailure{host: host, stage: "connect", err: lastErr}, false
}

// sortFailures orders failures as the hosts are ordered in the hostfile.
func sortFailures(fails []hostFailure, hosts []string) {
	pos := make(map[string]int, len(hosts))
	for i, h := range hosts {
		pos[h] = i
	}
	sort.Slice(fails, func(i, j int) bool { return pos[fails[i].host] < pos[fails[j].host] })
}
