package gangstatus

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/rankgate/rankgate/integrations/kubernetes/api/v1alpha1"
)

func unstructuredGang(t *testing.T, name, phase, rv string) *unstructured.Unstructured {
	t.Helper()
	g := &v1alpha1.Gang{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Gang"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", ResourceVersion: rv},
		Spec:       v1alpha1.GangSpec{Job: v1alpha1.JobReference{Kind: "PyTorchJob", Name: name}, Attempt: 1},
		Status:     v1alpha1.GangStatus{Phase: v1alpha1.GangPhase(phase)},
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(g)
	require.NoError(t, err)
	return &unstructured.Unstructured{Object: obj}
}

// Watch shows the list, then each change; a watch call that ends is
// reopened from the last version seen, and one whose version expired
// (410 Gone) makes it list again.
func TestWatchReconnectsAndRelists(t *testing.T) {
	scheme := runtime.NewScheme()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{GVR: "GangList"})

	var mu sync.Mutex
	lists, watchRVs := 0, []string{}
	dyn.PrependReactor("list", "gangs", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		lists++
		l := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "rankgate.io/v1alpha1", "kind": "GangList"}}
		l.SetResourceVersion([]string{"10", "20"}[min(lists-1, 1)])
		l.Items = []unstructured.Unstructured{*unstructuredGang(t, "a", "WaitingForRanks", "10")}
		return true, l, nil
	})
	watches := make(chan *watch.FakeWatcher, 4)
	dyn.PrependWatchReactor("gangs", func(a k8stesting.Action) (bool, watch.Interface, error) {
		mu.Lock()
		watchRVs = append(watchRVs, a.(k8stesting.WatchActionImpl).GetWatchRestrictions().ResourceVersion)
		mu.Unlock()
		w := watch.NewFakeWithChanSize(4, false)
		watches <- w
		return true, w, nil
	})

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	shown := make(chan []string, 8)
	done := make(chan error, 1)
	go func() {
		done <- Watch(ctx, dyn, "ml", Job{}, WatchOptions{Deadline: time.Minute}, func(gs []v1alpha1.Gang) error {
			var phases []string
			for _, g := range gs {
				phases = append(phases, g.Name+"="+string(g.Status.Phase))
			}
			shown <- phases
			return nil
		})
	}()
	next := func() []string {
		select {
		case s := <-shown:
			return s
		case <-time.After(10 * time.Second):
			t.Fatal("nothing shown")
			return nil
		}
	}
	require.Equal(t, []string{"a=WaitingForRanks"}, next(), "the list")

	w := <-watches
	w.Add(unstructuredGang(t, "b", "WaitingForPlacement", "11"))
	require.Equal(t, []string{"a=WaitingForRanks", "b=WaitingForPlacement"}, next())
	w.Stop() // the watch call ends (its deadline): reopened from version 11

	w = <-watches
	w.Modify(unstructuredGang(t, "a", "Passed", "12"))
	require.Equal(t, []string{"a=Passed", "b=WaitingForPlacement"}, next())
	w.Error(&apierrors.NewResourceExpired("too old").ErrStatus) // 410: list again

	require.Equal(t, []string{"a=WaitingForRanks"}, next(), "the list again, b is gone")
	w = <-watches
	w.Delete(unstructuredGang(t, "a", "Passed", "21"))
	require.Empty(t, next())

	cancel()
	require.NoError(t, <-done, "the end of ctx is the normal end")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 2, lists)
	require.Equal(t, []string{"10", "11", "20"}, watchRVs, "from the list, from the last change, from the new list")
}
