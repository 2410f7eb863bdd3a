package e2e

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/rankgate/rankgate/integrations/kubernetes/api/v1alpha1"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
)

// TestBenchGangWriteCost: what one verdict write costs the control plane,
// in CPU of the kube-apiserver and etcd processes (read from /proc), for
// writes made one after another on an otherwise idle envtest: a verdict
// recorded in an 8-rank Gang's status (what the controller writes), and
// for comparison the Lease create that recorded verdicts before.
//
//	RANKGATE_BENCH=1 go test -run '^TestBenchGangWriteCost$' -v ./integrations/kubernetes/e2e/
func TestBenchGangWriteCost(t *testing.T) {
	benchOnly(t)
	ctx := context.Background()
	ns := newNamespace(t, "bench-gang-write", false)
	n := envInt("RANKGATE_BENCH_WRITES", 500)
	api, db := controlPlanePIDs(t)

	gangs := make([]*v1alpha1.Gang, n)
	for i := range gangs {
		g := &v1alpha1.Gang{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pytorchjob-job-%04d-0", i), Namespace: ns,
				Labels: map[string]string{contract.LabelJobKind: "PyTorchJob", contract.LabelJobName: fmt.Sprintf("job-%04d", i), contract.LabelJobUID: fmt.Sprintf("00000000-0000-0000-0000-%012d", i)}},
			Spec: v1alpha1.GangSpec{Job: v1alpha1.JobReference{APIVersion: "kubeflow.org/v1", Kind: "PyTorchJob", Name: fmt.Sprintf("job-%04d", i), UID: "u"},
				Attempt: 1, ExpectedRanks: 8, Timeout: &metav1.Duration{Duration: 10 * time.Minute}},
		}
		require.NoError(t, k8s.Create(ctx, g))
		gangs[i] = g
	}

	measure := func(what string, write func(i int)) {
		a0, e0 := procCPU(t, api), procCPU(t, db)
		start := time.Now()
		for i := 0; i < n; i++ {
			write(i)
		}
		wall := time.Since(start)
		a, e := procCPU(t, api)-a0, procCPU(t, db)-e0
		t.Logf("%-40s %d writes: kube-apiserver %.2f ms CPU each, etcd %.2f ms, wall %.2f ms each",
			what, n, ms(a)/float64(n), ms(e)/float64(n), ms(wall)/float64(n))
	}
	measure("Gang status: verdict, 8 ranks", func(i int) {
		g := gangs[i]
		g.Status = verdictStatus(i)
		require.NoError(t, k8s.Status().Update(ctx, g))
	})
	if os.Getenv("RANKGATE_BENCH_VARIANTS") != "" {
		for i := range gangs {
			gangs[i].ManagedFields = nil
		}
		measure("same, again (no managed fields sent)", func(i int) {
			g := gangs[i]
			g.Status = verdictStatus(i + 1)
			require.NoError(t, k8s.Status().Update(ctx, g))
			g.ManagedFields = nil
		})
		measure("same, no ranks", func(i int) {
			g := gangs[i]
			g.Status = verdictStatus(i + 2)
			g.Status.Ranks = nil
			require.NoError(t, k8s.Status().Update(ctx, g))
			g.ManagedFields = nil
		})
		if dir := os.Getenv("RANKGATE_BENCH_OUT"); dir != "" {
			hc, err := rest.HTTPClientFor(restCfg)
			require.NoError(t, err)
			done := make(chan struct{})
			go func() {
				defer close(done)
				saveAPIServerProfile(t, hc, 3, filepath.Join(dir, "gangwrite-apiserver.pprof"))
			}()
			defer func() { <-done }()
		}
		measure("same, only phase", func(i int) {
			g := gangs[i]
			g.Status = v1alpha1.GangStatus{Phase: v1alpha1.PhaseFailed}
			if i%2 == 0 {
				g.Status.Phase = v1alpha1.PhasePassed
			}
			require.NoError(t, k8s.Status().Update(ctx, g))
			g.ManagedFields = nil
		})
	}
	measure("Lease create (the earlier record)", func(i int) {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("verdict-%04d", i), Namespace: ns,
			Labels:      map[string]string{"rankgate.io/record": "true"},
			Annotations: map[string]string{"rankgate.io/verdict": "pass", "rankgate.io/report": `{"verdict":"pass","subject":"x","findings":[]}`}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("rankgate-controller-7d9f-abcde")}}
		require.NoError(t, k8s.Create(ctx, l))
	})
}

// verdictStatus is the status the controller records for a passing 8-rank
// gang.
func verdictStatus(i int) v1alpha1.GangStatus {
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	st := v1alpha1.GangStatus{Phase: v1alpha1.PhasePassed, Progress: "8/8", ReportedRanks: 8, FirstReportAt: &now, Deadline: &now,
		Verdict: "pass", Reason: "all ranks passed", Message: "all ranks passed", DecidedAt: &now, DecidedBy: "rankgate-controller-7d9f-abcde",
		Report: fmt.Sprintf(`{"verdict":"pass","subject":"bench/PyTorchJob/job-%04d","findings":[]}`, i)}
	for r := 0; r < 8; r++ {
		st.Ranks = append(st.Ranks, v1alpha1.RankStatus{Rank: int32(r), Pod: fmt.Sprintf("job-%04d-worker-%d", i, r), Node: fmt.Sprintf("node-%d", r),
			Devices: []string{fmt.Sprintf("GPU-node-%d-0", r)}, Verdict: "pass"})
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: contract.ConditionDecided, Status: metav1.ConditionTrue, Reason: "Passed",
		Message: "verdict pass recorded by rankgate-controller-7d9f-abcde", ObservedGeneration: 1})
	return st
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// controlPlanePIDs finds the envtest kube-apiserver serving restCfg and
// its etcd, by their command lines.
func controlPlanePIDs(t *testing.T) (api, db int) {
	u, err := url.Parse(restCfg.Host)
	require.NoError(t, err)
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	require.NoError(t, err)
	etcdURL := ""
	cmdlines := map[int]string{}
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		pid, _ := strconv.Atoi(strings.Split(p, "/")[2])
		cmd := strings.ReplaceAll(string(b), "\x00", " ")
		cmdlines[pid] = cmd
		if strings.Contains(cmd, "kube-apiserver") && strings.Contains(cmd, "--secure-port="+u.Port()) {
			api = pid
			if m := regexp.MustCompile(`--etcd-servers=(\S+)`).FindStringSubmatch(cmd); m != nil {
				etcdURL = m[1]
			}
		}
	}
	require.NotZero(t, api, "no kube-apiserver on port %s", u.Port())
	for pid, cmd := range cmdlines {
		if strings.Contains(cmd, "/etcd ") && etcdURL != "" && strings.Contains(cmd, etcdURL) {
			db = pid
		}
	}
	require.NotZero(t, db, "no etcd at %s", etcdURL)
	return api, db
}

// procCPU is the user+system CPU time process pid has used.
func procCPU(t *testing.T, pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(t, err)
	// The command name is in parentheses and may hold spaces.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond // USER_HZ = 100
}
