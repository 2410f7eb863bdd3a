// Package envtestutil starts a real kube-apiserver and etcd for tests, with
// the job CRDs (PyTorchJob kubeflow.org/v1, MPIJob kubeflow.org/v2beta1,
// TrainJob trainer.kubeflow.org/v1alpha1, JobSet jobset.x-k8s.io/v1alpha2),
// Kueue's Workload (kueue.x-k8s.io/v1beta2) and rankgate's Gang
// (rankgate.io/v1alpha1) installed, through controller-runtime's envtest.
//
// The binaries are not downloaded: they are built from the Go modules pinned
// in tools/ by `make test-binaries` (hack/build-test-binaries.sh) into
// bin/k8s/. When they are missing, Start fails the test with a hint, unless
// RANKGATE_SKIP_ENVTEST=1, in which case it skips the test.
//
// Typical use:
//
//	cfg, stop := envtestutil.Start(t)
//	defer stop()
//	c := envtestutil.NewClient(t, cfg)
//
// Starting takes a few seconds (more on a loaded machine); packages with many
// such tests should share one environment (start it in TestMain with
// StartEnv).
//
// controller-runtime prints a warning with a stack trace when no logger was
// set within 30 s of process start (envtest logs through it). Test packages
// should call sigs.k8s.io/controller-runtime/pkg/log.SetLogger in TestMain,
// e.g. with logr.Discard(); this package does not, since only the first
// SetLogger call takes effect.
package envtestutil

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	apiruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/api/v1alpha1"
)

const (
	// ModulePath is the root module's path, used to recognise the repo root.
	ModulePath = "github.com/rankgate/rankgate"
	// SkipEnv, set to "1", turns "binaries missing" into a skip instead of a
	// failure.
	SkipEnv = "RANKGATE_SKIP_ENVTEST"
	// BinDirEnv overrides the directory holding etcd and kube-apiserver
	// (default <repo>/bin/k8s), as hack/build-test-binaries.sh does.
	BinDirEnv = "RANKGATE_TEST_BIN_DIR"
)

// CRDDir is the location of the Kubeflow CRDs relative to the repo root.
var CRDDir = filepath.Join("integrations", "kubernetes", "testdata", "crds")

// GangCRDDir holds rankgate's own CRD (gangs.rankgate.io) as shipped.
var GangCRDDir = filepath.Join("configs", "deploy", "crds")

// Option changes what StartEnv installs.
type Option func(*options)

type options struct{ noGangCRD bool }

// WithoutGangCRD starts the API server with the Kubeflow CRDs only, as a
// cluster where rankgate is not installed.
func WithoutGangCRD() Option { return func(o *options) { o.noGangCRD = true } }

func crdDirs(root string, o options) []string {
	dirs := []string{filepath.Join(root, CRDDir)}
	if !o.noGangCRD {
		dirs = append(dirs, filepath.Join(root, GangCRDDir))
	}
	return dirs
}

// ErrBinariesMissing is wrapped by StartEnv's error when bin/k8s lacks a binary.
var ErrBinariesMissing = errors.New("envtest binaries missing: run `make test-binaries` (hack/build-test-binaries.sh)")

// RepoRoot finds the root of this repository: the nearest directory, from
// the working directory (or, failing that, this source file) upwards, whose
// go.mod declares ModulePath.
func RepoRoot() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	for _, dir := range starts {
		for {
			if isRoot(dir) {
				return dir, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", fmt.Errorf("envtestutil: no directory above %v has a go.mod for %s", starts, ModulePath)
}

func isRoot(dir string) bool {
	data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == "module" && strings.Trim(f[1], `"`) == ModulePath {
			return true
		}
	}
	return false
}

// BinDir returns the directory holding etcd and kube-apiserver and checks
// that both are there and executable; the error wraps ErrBinariesMissing.
func BinDir(root string) (string, error) {
	dir := os.Getenv(BinDirEnv)
	if dir == "" {
		dir = filepath.Join(root, "bin", "k8s")
	}
	var missing []string
	for _, name := range []string{"etcd", "kube-apiserver"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			missing = append(missing, filepath.Join(dir, name))
		}
	}
	if len(missing) > 0 {
		return dir, fmt.Errorf("%w; not found: %s", ErrBinariesMissing, strings.Join(missing, ", "))
	}
	return dir, nil
}

// Scheme returns a scheme with the built-in Kubernetes types, PyTorchJob
// (and the other training-operator kinds) in kubeflow.org/v1, MPIJob in
// kubeflow.org/v2beta1 and Gang in rankgate.io/v1alpha1.
func Scheme() *apiruntime.Scheme {
	s := kubeflow.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// StartEnv starts etcd and kube-apiserver from bin/k8s with the Kubeflow
// CRDs installed, for use outside a single test (TestMain). The caller must
// call Stop on the returned environment. It does not touch a kubeconfig and
// ignores USE_EXISTING_CLUSTER and KUBEBUILDER_ASSETS.
func StartEnv(opts ...Option) (*envtest.Environment, *rest.Config, error) {
	var o options
	for _, f := range opts {
		f(&o)
	}
	root, err := RepoRoot()
	if err != nil {
		return nil, nil, err
	}
	bin, err := BinDir(root)
	if err != nil {
		return nil, nil, err
	}
	useExisting := false
	env := &envtest.Environment{
		BinaryAssetsDirectory: bin,
		CRDDirectoryPaths:     crdDirs(root, o),
		ErrorIfCRDPathMissing: true,
		UseExistingCluster:    &useExisting,
		Scheme:                Scheme(),
		// A cold start on a loaded 2-core machine can exceed the 20 s default.
		ControlPlaneStartTimeout: 90 * time.Second,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	// Explicit paths so that KUBEBUILDER_ASSETS / TEST_ASSET_* in the
	// environment cannot swap in other binaries.
	env.ControlPlane.GetAPIServer().Path = filepath.Join(bin, "kube-apiserver")
	env.ControlPlane.Etcd = &envtest.Etcd{Path: filepath.Join(bin, "etcd")}
	cfg, err := env.Start()
	if err != nil {
		_ = env.Stop()
		return nil, nil, fmt.Errorf("envtestutil: starting kube-apiserver/etcd from %s: %w", bin, err)
	}
	return env, cfg, nil
}

// Start starts a real API server for test t (see StartEnv) and returns its
// admin config and an idempotent stop function, which is also registered
// with t.Cleanup. Missing binaries fail t, or skip it when
// RANKGATE_SKIP_ENVTEST=1.
func Start(t testing.TB, opts ...Option) (*rest.Config, func()) {
	t.Helper()
	begin := time.Now()
	env, cfg, err := StartEnv(opts...)
	if err != nil {
		if errors.Is(err, ErrBinariesMissing) && os.Getenv(SkipEnv) == "1" {
			t.Skipf("skipping (%s=1): %v", SkipEnv, err)
		}
		t.Fatalf("envtestutil: %v", err)
	}
	t.Logf("envtest: kube-apiserver %s up in %s", cfg.Host, time.Since(begin).Round(time.Millisecond))
	var once sync.Once
	stop := func() {
		once.Do(func() {
			if err := env.Stop(); err != nil {
				t.Errorf("envtestutil: stopping control plane: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return cfg, stop
}

// NewClient returns a controller-runtime client for cfg using Scheme().
func NewClient(t testing.TB, cfg *rest.Config) client.Client {
	t.Helper()
	c, err := client.New(cfg, client.Options{Scheme: Scheme()})
	if err != nil {
		t.Fatalf("envtestutil: new client: %v", err)
	}
	return c
}
