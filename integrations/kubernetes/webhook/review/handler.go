package review

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// envelope is the part of an admission.k8s.io/v1 AdmissionReview the
// handlers read. Everything else (the user's groups and extra, options,
// the request's resource) is skipped by the decoder, not allocated.
type envelope struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Request    *struct {
		UID       types.UID               `json:"uid"`
		Kind      metav1.GroupVersionKind `json:"kind"`
		Name      string                  `json:"name"`
		Namespace string                  `json:"namespace"`
		Operation admissionv1.Operation   `json:"operation"`
		UserInfo  struct {
			Username string `json:"username"`
		} `json:"userInfo"`
		DryRun    *bool    `json:"dryRun"`
		Object    rawValue `json:"object"`
		OldObject rawValue `json:"oldObject"`
	} `json:"request"`
}

// rawValue keeps a value's bytes as a slice of the body (json.Unmarshal
// hands UnmarshalJSON a slice of its input, which the handler owns and
// never reuses), so that the object is not copied.
type rawValue []byte

func (r *rawValue) UnmarshalJSON(b []byte) error {
	if string(b) != "null" {
		*r = b
	}
	return nil
}

// Handler serves one admission.Handler: it reads the body (at most maxBody
// bytes), decodes the envelope once and writes the handler's answer as an
// admission.k8s.io/v1 AdmissionReview. A panic in the handler is answered
// 500 and logged.
func Handler(h admission.Handler, maxBody int64, log logr.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "POST an AdmissionReview", http.StatusMethodNotAllowed)
			return
		}
		if ct := r.Header.Get("Content-Type"); ct != "application/json" {
			http.Error(w, fmt.Sprintf("content type %q: want application/json", ct), http.StatusUnsupportedMediaType)
			return
		}
		body, status, err := readBody(r, maxBody)
		if err != nil {
			http.Error(w, err.Error(), status)
			return
		}
		var env envelope
		if err := json.Unmarshal(body, &env); err != nil || env.Request == nil {
			if err == nil {
				err = errors.New("no request")
			}
			http.Error(w, "decoding the AdmissionReview: "+err.Error(), http.StatusBadRequest)
			return
		}
		if env.APIVersion != admissionv1.SchemeGroupVersion.String() || env.Kind != "AdmissionReview" {
			http.Error(w, fmt.Sprintf("%s %s: want an admission.k8s.io/v1 AdmissionReview", env.APIVersion, env.Kind), http.StatusBadRequest)
			return
		}
		q := env.Request
		req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			UID: q.UID, Kind: q.Kind, Name: q.Name, Namespace: q.Namespace, Operation: q.Operation,
			UserInfo: authnv1.UserInfo{Username: q.UserInfo.Username}, DryRun: q.DryRun,
		}}
		req.Object.Raw, req.OldObject.Raw = q.Object, q.OldObject
		resp := handle(r.Context(), h, req, log)
		out := admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: env.APIVersion, Kind: env.Kind}, Response: &resp.AdmissionResponse}
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(out); err != nil {
			log.V(1).Info("writing the admission response", "error", err.Error())
		}
	})
}

// readBody reads the whole body, at most max bytes: into a buffer of the
// announced size when the client says it.
func readBody(r *http.Request, max int64) ([]byte, int, error) {
	if r.ContentLength > max {
		return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("a body of %d bytes exceeds the limit of %d bytes", r.ContentLength, max)
	}
	if r.ContentLength > 0 {
		b := make([]byte, r.ContentLength)
		if _, err := io.ReadFull(r.Body, b); err != nil {
			return nil, http.StatusBadRequest, fmt.Errorf("reading the body: %w", err)
		}
		return b, 0, nil
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, max+1))
	if err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("reading the body: %w", err)
	}
	if int64(len(b)) > max {
		return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("the body exceeds the limit of %d bytes", max)
	}
	return b, 0, nil
}

func handle(ctx context.Context, h admission.Handler, req admission.Request, log logr.Logger) (resp admission.Response) {
	defer func() {
		if p := recover(); p != nil {
			log.Error(fmt.Errorf("panic: %v", p), "admission handler", "kind", req.Kind.Kind, "namespace", req.Namespace, "name", req.Name)
			resp = admission.Errored(http.StatusInternalServerError, fmt.Errorf("panic: %v [recovered]", p))
			resp.UID = req.UID
		}
	}()
	resp = h.Handle(ctx, req)
	if err := resp.Complete(req); err != nil {
		resp = admission.Errored(http.StatusInternalServerError, fmt.Errorf("encoding the answer: %w", err))
		resp.UID = req.UID
	}
	return resp
}
