//go:build !rankgate_node

package app

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/rankgate/rankgate/verdict"
)

func TestParseJobRef(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want jobRef
		err  string
	}{
		{args: []string{"train"}, want: jobRef{Name: "train"}},
		{args: []string{"pytorchjob/train"}, want: jobRef{Kind: "PyTorchJob", Name: "train"}},
		{args: []string{"PyTorchJobs/train"}, want: jobRef{Kind: "PyTorchJob", Name: "train"}},
		{args: []string{"pytorchjob.kubeflow.org/train"}, want: jobRef{Kind: "PyTorchJob", Name: "train"}},
		{args: []string{"pytorchjobs.v1.kubeflow.org/train"}, want: jobRef{Kind: "PyTorchJob", Name: "train"}},
		{args: []string{"mpijob.kubeflow.org/train"}, want: jobRef{Kind: "MPIJob", Name: "train"}},
		{args: []string{"mpijobs.v2beta1.kubeflow.org/hpc.a"}, want: jobRef{Kind: "MPIJob", Name: "hpc.a"}},
		{args: []string{"pytorchjob", "train"}, want: jobRef{Kind: "PyTorchJob", Name: "train"}},
		{args: []string{"MPIJob", "train"}, want: jobRef{Kind: "MPIJob", Name: "train"}},
		// diagnose's form: a first segment that is no job kind is a namespace.
		{args: []string{"ml/train"}, want: jobRef{Namespace: "ml", Name: "train"}},

		{args: nil, err: "want one job"},
		{args: []string{"a", "b", "c"}, err: "want one job"},
		{args: []string{""}, err: "the job name is missing"},
		{args: []string{"pytorchjob/"}, err: "the job name is missing"},
		{args: []string{"ml/a/b"}, err: `"a/b": not a job name`},
		{args: []string{"Train"}, err: `"Train": not a job name`},
		{args: []string{"pytorchjob", "ml/train"}, err: `"ml/train": not a job name`},
		{args: []string{"train", "x"}, err: "the first of two arguments is the kind"},
		{args: []string{"tfjob.kubeflow.org/x"}, err: "not a job kind rankgate gates"},
		{args: []string{"mpijob.v1.kubeflow.org/x"}, err: "MPIJob is served as mpijobs.v2beta1.kubeflow.org"},
		{args: []string{"pytorchjob.example.com", "x"}, err: "PyTorchJob is served as pytorchjobs.v1.kubeflow.org"},
		{args: []string{"Bad_NS/x"}, err: "neither a job kind nor a namespace"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			got, err := parseJobRef(tc.args)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				require.Equal(t, verdict.ExitUsage, verdict.Code(err))
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestJobNamespaceAndKind(t *testing.T) {
	fromContext := func() (string, error) { return "ctx-ns", nil }
	ns, err := jobNamespace(jobRef{Name: "a"}, "", fromContext)
	require.NoError(t, err)
	require.Equal(t, "ctx-ns", ns, "the kubeconfig context's namespace is the default")
	ns, err = jobNamespace(jobRef{Name: "a"}, "flag", fromContext)
	require.NoError(t, err)
	require.Equal(t, "flag", ns)
	ns, err = jobNamespace(jobRef{Namespace: "arg", Name: "a"}, "arg", fromContext)
	require.NoError(t, err)
	require.Equal(t, "arg", ns, "-n and NAMESPACE/NAME may agree")
	_, err = jobNamespace(jobRef{Namespace: "arg", Name: "a"}, "flag", fromContext)
	require.ErrorContains(t, err, `the job names namespace "arg", --namespace says "flag"`)
	_, err = jobNamespace(jobRef{Name: "a"}, "", func() (string, error) { return "", errors.New("no kubeconfig") })
	require.ErrorContains(t, err, "no kubeconfig")

	kind, err := jobKind(jobRef{Name: "a"}, "mpijobs")
	require.NoError(t, err)
	require.Equal(t, "MPIJob", kind)
	kind, err = jobKind(jobRef{Kind: "MPIJob", Name: "a"}, "")
	require.NoError(t, err)
	require.Equal(t, "MPIJob", kind)
	_, err = jobKind(jobRef{Kind: "MPIJob", Name: "a"}, "PyTorchJob")
	require.ErrorContains(t, err, "the job is a MPIJob, --kind says PyTorchJob")
	_, err = jobKind(jobRef{Name: "a"}, "TFJob")
	require.ErrorContains(t, err, `kind "TFJob": want PyTorchJob, MPIJob, TrainJob or JobSet`)

	r, err := parsePodRef("research/nb-1")
	require.NoError(t, err)
	require.Equal(t, jobRef{Namespace: "research", Name: "nb-1"}, r)
	r, err = parsePodRef("nb-1")
	require.NoError(t, err)
	require.Equal(t, jobRef{Name: "nb-1"}, r)
	_, err = parsePodRef("a/b/c")
	require.ErrorContains(t, err, "not a pod name")
}

// FuzzParseJobRef: any command line either parses into a valid reference
// that prints back to the same reference, or is a usage error; never a
// panic.
func FuzzParseJobRef(f *testing.F) {
	for _, s := range []string{"train", "pytorchjob/train", "mpijob.kubeflow.org/x", "ml/train", "pytorchjob train", "a/b/c", "tfjob.kubeflow.org/x", "PyTorchJobs.v1.kubeflow.org/a.b", "", "/", " x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		args := strings.Fields(line)
		if strings.Contains(line, "\x00") {
			args = []string{line}
		}
		r, err := parseJobRef(args)
		if err != nil {
			require.Equal(t, verdict.ExitUsage, verdict.Code(err), "%q: %v", line, err)
			return
		}
		require.Empty(t, validation.IsDNS1123Subdomain(r.Name), "%q gave name %q", line, r.Name)
		require.Contains(t, []string{"", "PyTorchJob", "MPIJob"}, r.Kind)
		if r.Namespace != "" {
			require.Empty(t, validation.IsDNS1123Label(r.Namespace))
			require.Empty(t, r.Kind)
			return
		}
		back, err := parseJobRef([]string{r.String()})
		require.NoError(t, err, "%q printed as %q", line, r.String())
		require.Equal(t, r, back)
	})
}
