package review

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

func TestCheckShape(t *testing.T) {
	list := func(item string, n int) string {
		return "[" + strings.TrimSuffix(strings.Repeat(item+",", n), ",") + "]"
	}
	for _, tc := range []struct {
		name, json string
		ok         bool
	}{
		{"a job", `{"metadata":{"name":"j"},"spec":{"x":[{"a":"1"},{"b":[1,2,"]"]}]}}`, true},
		{"objects in lists at the bound", `{"l":` + list("{}", MaxListObjects) + `}`, true},
		{"objects in lists past the bound", `{"l":` + list("{}", MaxListObjects+1) + `}`, false},
		{"values past the bound", `{"l":` + list("1", MaxValues+1) + `}`, false},
		{"members count as values", `{"m":{` + strings.TrimSuffix(strings.Repeat(`"k":1,`, MaxValues), ",") + `,"x":1}}`, false},
		{"braces in strings are text", `{"s":"` + strings.Repeat("{}", MaxListObjects+1) + `"}`, true},
		{"unbalanced", `{}}`, false},
		{"too large", `"` + strings.Repeat("a", MaxObject) + `"`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckShape([]byte(tc.json))
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
			}
		})
	}
}

func TestDecodeJobKinds(t *testing.T) {
	raw := []byte(`{"apiVersion":"kubeflow.org/v1","kind":"PyTorchJob","metadata":{"generateName":"j-"},"spec":{"pytorchReplicaSpecs":{"Worker":{"template":{"spec":{"containers":[{"name":"c"}]}}}}}}`)
	j, err := DecodeJob(metav1.GroupVersionKind{Group: "kubeflow.org", Version: "v1", Kind: "PyTorchJob"}, "ml", raw)
	require.NoError(t, err)
	require.Equal(t, "ml", j.Namespace(), "the review's namespace for an object that names none")
	j, err = DecodeJob(metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, "ml", raw)
	require.NoError(t, err)
	require.Nil(t, j)
	_, err = DecodeJob(metav1.GroupVersionKind{Group: "kubeflow.org", Version: "v1", Kind: "PyTorchJob"}, "ml", []byte(`{"l":[`+strings.Repeat("{},", MaxListObjects)+`{}]}`))
	require.ErrorIs(t, err, ErrTooLarge)
}

type allow struct{ block chan struct{} }

func (a allow) Handle(context.Context, admission.Request) admission.Response {
	if a.block != nil {
		<-a.block
	}
	return admission.Allowed("")
}

const review = `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u1","kind":{"group":"kubeflow.org","version":"v1","kind":"PyTorchJob"},"operation":"CREATE","userInfo":{"username":"u","groups":["a"]},"object":{}}}`

// The server's bounds in front of a handler: the announced size first,
// then a decode slot (503 with Retry-After past the wait), then the body.
func TestServerBounds(t *testing.T) {
	block := make(chan struct{})
	s := NewServer(Options{MaxBody: 1 << 10, MaxDecodes: 1, DecodeWait: 50 * time.Millisecond, Log: logr.Discard()})
	s.RegisterAdmission("/p", allow{block: block})
	srv := httptest.NewServer(s.WebhookMux())
	defer srv.Close()
	post := func(body string) *http.Response {
		r, err := http.Post(srv.URL+"/p", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		r.Body.Close()
		return r
	}
	require.Equal(t, http.StatusRequestEntityTooLarge, post(review+strings.Repeat(" ", 1<<10)).StatusCode)

	done := make(chan *http.Response)
	go func() { done <- post(review) }()
	require.Eventually(t, func() bool { return len(s.decodes) == 1 }, 5*time.Second, 5*time.Millisecond)
	busy := post(review)
	require.Equal(t, http.StatusServiceUnavailable, busy.StatusCode)
	require.Equal(t, "1", busy.Header.Get("Retry-After"))
	close(block)
	require.Equal(t, http.StatusOK, (<-done).StatusCode)
}

// The answer is an admission.k8s.io/v1 AdmissionReview with the request's
// UID; a review of another version is refused.
func TestHandlerAnswers(t *testing.T) {
	h := Handler(allow{}, 1<<20, logr.Discard())
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/p", bytes.NewBufferString(review))
	req.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code)
	var out struct {
		APIVersion string `json:"apiVersion"`
		Response   struct {
			UID     string `json:"uid"`
			Allowed bool   `json:"allowed"`
		} `json:"response"`
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out))
	require.Equal(t, "admission.k8s.io/v1", out.APIVersion)
	require.Equal(t, "u1", out.Response.UID)
	require.True(t, out.Response.Allowed)

	rec = httptest.NewRecorder()
	req = httptest.NewRequest(http.MethodPost, "/p", strings.NewReader(strings.Replace(review, "admission.k8s.io/v1", "admission.k8s.io/v1beta1", 1)))
	req.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(rec, req)
	require.Equal(t, http.StatusBadRequest, rec.Code)
}

// FuzzCheckShape: on valid JSON the scan agrees with counting the decoded
// value's list entries, object members and objects in lists; on anything
// it never panics.
func FuzzCheckShape(f *testing.F) {
	for _, s := range []string{`{}`, `[{}]`, `{"a":"\"{"}`, `{"spec":{"pytorchReplicaSpecs":{"W":{"template":{"spec":{"containers":[{}]}}}}}}`, `]`, `"\`, `[[],{},[{}]]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		err := CheckShape(raw)
		var v any
		if json.Unmarshal(raw, &v) != nil {
			return
		}
		values, objects := count(v, false)
		want := values <= MaxValues && objects <= MaxListObjects
		require.Equal(t, want, err == nil, "values %d, objects in lists %d: %v", values, objects, err)
	})
}

// count: list entries and object members under v, and objects in lists.
func count(v any, inList bool) (values, objects int) {
	switch x := v.(type) {
	case []any:
		for _, e := range x {
			a, b := count(e, true)
			values, objects = values+1+a, objects+b
		}
	case map[string]any:
		if inList {
			objects++
		}
		for _, e := range x {
			a, b := count(e, false)
			values, objects = values+1+a, objects+b
		}
	}
	return values, objects
}
