package controller

import (
	"testing"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// A pod fits its job when its name and replica index are those the
// operator gives the pod of that replica.
func TestPodFits(t *testing.T) {
	pod := func(name string, labels map[string]string, owner string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", Labels: labels}}
		if owner != "" {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: owner, Controller: ptr.To(true)}}
		}
		return p
	}
	pt := func(typ, idx string) map[string]string {
		return map[string]string{LabelJobName: "pt", LabelReplicaType: typ, LabelReplicaIndex: idx}
	}
	mp := func(role, idx string) map[string]string {
		l := map[string]string{LabelJobName: "mpi", LabelJobRole: role}
		if idx != "" {
			l[LabelReplicaIndex] = idx
		}
		return l
	}
	for _, tc := range []struct {
		name string
		j    job
		p    *corev1.Pod
		fits bool
		why  string
	}{
		{"master", kubeflow.MustFromObject(ptJob(true, 2)), pod("pt-master-0", pt("master", "0"), ""), true, ""},
		{"worker", kubeflow.MustFromObject(ptJob(true, 2)), pod("pt-worker-1", pt("worker", "1"), ""), true, ""},
		{"worker beyond the spec", kubeflow.MustFromObject(ptJob(true, 2)), pod("pt-worker-2", pt("worker", "2"), ""), false, "outside the spec's 2 Worker replica(s)"},
		{"another name", kubeflow.MustFromObject(ptJob(true, 2)), pod("pt-evil", pt("worker", "1"), ""), false, "names the pod of Worker 1 pt-worker-1, not pt-evil"},
		{"name of another index", kubeflow.MustFromObject(ptJob(true, 2)), pod("pt-worker-0", pt("worker", "1"), ""), false, "pt-worker-1"},
		{"no replica type", kubeflow.MustFromObject(ptJob(true, 2)), pod("pt-worker-0", map[string]string{LabelJobName: "pt", LabelReplicaIndex: "0"}, ""), false, "none of the job's replica types"},
		{"mpi worker", kubeflow.MustFromObject(mpJob(2, false)), pod("mpi-worker-1", mp("worker", "1"), ""), true, ""},
		{"mpi worker, launcher is rank 0", kubeflow.MustFromObject(mpJob(2, true)), pod("mpi-worker-0", mp("worker", "1"), ""), true, ""},
		{"mpi worker named by its label, launcher is rank 0", kubeflow.MustFromObject(mpJob(2, true)), pod("mpi-worker-1", mp("worker", "1"), ""), false, "mpi-worker-0"},
		{"mpi launcher", kubeflow.MustFromObject(mpJob(2, false)), pod("mpi-launcher-x7k2p", mp("launcher", ""), "mpi-launcher"), true, ""},
		{"mpi launcher as rank 0", kubeflow.MustFromObject(mpJob(2, true)), pod("mpi-launcher-x7k2p", mp("launcher", "0"), "mpi-launcher"), true, ""},
		{"mpi launcher of another Job", kubeflow.MustFromObject(mpJob(2, false)), pod("mpi-launcher-x7k2p", mp("launcher", ""), "other"), false, "controlled by the Job mpi-launcher"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := podFits(tc.j, tc.p)
			if tc.fits {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.why)
		})
	}
}
