package cluster

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubeflow/trainjob"
	"github.com/rankgate/rankgate/internal/fileinput"
	"github.com/rankgate/rankgate/verdict"
)

// InputError is bad input in a file: it names the file, the document (and
// List item) and the object. diagnose exits 2 on it.
type InputError struct {
	File   string
	Doc    int // 1-based document in the file
	Item   int // 1-based item in a List, 0 if not in a List
	Object string
	Err    error
}

func (e *InputError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	fmt.Fprintf(&b, ": document %d", e.Doc)
	if e.Item > 0 {
		fmt.Fprintf(&b, ", item %d", e.Item)
	}
	if e.Object != "" {
		fmt.Fprintf(&b, " (%s)", e.Object)
	}
	return b.String() + ": " + e.Err.Error()
}

func (e *InputError) Unwrap() error { return e.Err }

// ExitCode: bad input is exit 2.
func (e *InputError) ExitCode() int { return verdict.ExitUsage }

// LoadStats counts what a load read and skipped.
type LoadStats struct {
	Objects int
	// LabelsNodes lists the nodes read from their labels alone.
	LabelsNodes []LabelsNode
	// Skipped counts objects of kinds diagnose does not use, by
	// "apiVersion kind".
	Skipped map[string]int
}

func (s *LoadStats) skip(apiVersion, kind string) {
	if s.Skipped == nil {
		s.Skipped = map[string]int{}
	}
	s.Skipped[apiVersion+" "+kind]++
}

// MaxDumpSize bounds one file of `kubectl get -o yaml|json` output: a GPU
// Node with its GPU feature discovery labels is about 10 KiB, a pod about
// 4 KiB, so 64 MiB holds 1,000 GPU nodes and 13,000 pods. Bigger clusters
// are read from several files (-f per namespace), each with its own bound.
// The decoder holds several copies of a document: 64 MiB of garbage on one
// line peaks at about 600 MiB.
const MaxDumpSize = 64 << 20

// LoadFile reads one file ("-" is stdin, read until ctx ends) into b. It
// reads regular files only, and at most MaxDumpSize bytes.
func LoadFile(ctx context.Context, b *Builder, path string, stdin io.Reader, stats *LoadStats) error {
	name := path
	if path == fileinput.Stdin {
		name = "(stdin)"
	}
	r, err := fileinput.Open(ctx, path, stdin, MaxDumpSize)
	if err != nil {
		return err
	}
	defer r.Close()
	return Load(b, name, r, stats)
}

// Load reads Kubernetes objects as `kubectl get -o yaml|json` prints them:
// single objects, Lists (v1 List, NodeList, PodList, the job kinds' and
// runtimes' Lists, DeviceClassList) and multi-document YAML. Nodes, Pods,
// the jobs of every supported kind, the Trainer's runtimes (a TrainJob's
// pods are made from them) and DeviceClasses (resource.k8s.io, for the
// extended resources DRA serves) go into b; other kinds are counted in stats and skipped. A node's label map alone (`kubectl
// get node NAME -o jsonpath='{.metadata.labels}'`) is a node too
// (labelsNode). `kubectl describe` output is refused with the command that
// prints what diagnose reads (ErrDescribe).
func Load(b *Builder, name string, r io.Reader, stats *LoadStats) error {
	if stats == nil {
		stats = &LoadStats{}
	}
	// The decoder retries JSON as YAML and reports its own errors: keep
	// the reader's, which say what really ended the input.
	src := &readErr{r: r}
	br := bufio.NewReaderSize(src, describeSniff)
	head, _ := br.Peek(describeSniff) // a shorter input is all there is
	if err := describeError(head); err != nil {
		return &InputError{File: name, Doc: 1, Err: err}
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(br, 64<<10)
	for doc := 1; ; doc++ {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			if src.err != nil {
				return src.err // too large, or interrupted: not a syntax error
			}
			return &InputError{File: name, Doc: doc, Err: fmt.Errorf("not valid YAML or JSON: %w", err)}
		}
		raw = bytes.TrimSpace(raw)
		if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
			continue
		}
		if err := loadObject(b, name, raw, stats); err != nil {
			var ie *InputError
			if errors.As(err, &ie) {
				ie.File, ie.Doc = name, doc
				return ie
			}
			return &InputError{File: name, Doc: doc, Err: err}
		}
	}
}

type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Items []json.RawMessage `json:"items"`
}

func (t *typeMeta) object() string {
	s := t.Kind
	if t.Metadata.Namespace != "" {
		return s + " " + t.Metadata.Namespace + "/" + t.Metadata.Name
	}
	if t.Metadata.Name != "" {
		return s + " " + t.Metadata.Name
	}
	return s
}

func loadObject(b *Builder, file string, raw json.RawMessage, stats *LoadStats) error {
	if raw[0] != '{' {
		return errors.New("not a Kubernetes object: expected a mapping with apiVersion and kind")
	}
	var tm typeMeta
	if err := json.Unmarshal(raw, &tm); err != nil {
		if labels, ok := labelsOf(raw); ok {
			return loadLabels(b, file, labels, stats)
		}
		return fmt.Errorf("not a Kubernetes object: %w", err)
	}
	if tm.APIVersion == "" && tm.Kind == "" {
		if labels, ok := labelsOf(raw); ok {
			return loadLabels(b, file, labels, stats)
		}
	}
	if tm.APIVersion == "" || tm.Kind == "" {
		return errors.New("not a Kubernetes object: apiVersion or kind is missing (diagnose reads `kubectl get -o yaml` or `-o json` output)")
	}
	if strings.HasSuffix(tm.Kind, "List") {
		if !listKind(tm.APIVersion, tm.Kind) {
			stats.skip(tm.APIVersion, tm.Kind)
			return nil
		}
		for i, item := range tm.Items {
			item = bytes.TrimSpace(item)
			if len(item) == 0 || item[0] != '{' {
				return &InputError{Item: i + 1, Err: errors.New("list item is not an object")}
			}
			var itm typeMeta
			if err := json.Unmarshal(item, &itm); err != nil {
				return &InputError{Item: i + 1, Err: err}
			}
			if itm.Kind == "" {
				// Typed lists (NodeList, PodList) may omit item kinds.
				itm.APIVersion, itm.Kind = tm.APIVersion, strings.TrimSuffix(tm.Kind, "List")
			}
			if err := loadOne(b, &itm, item, stats); err != nil {
				return &InputError{Item: i + 1, Object: itm.object(), Err: err}
			}
		}
		return nil
	}
	if err := loadOne(b, &tm, raw, stats); err != nil {
		return &InputError{Object: tm.object(), Err: err}
	}
	return nil
}

// loadLabels adds a node known from its labels alone.
func loadLabels(b *Builder, file string, labels map[string]string, stats *LoadStats) error {
	n, ln, err := labelsNode(file, labels)
	if err != nil {
		return fmt.Errorf("node labels: %w", err)
	}
	stats.Objects++
	if err := b.addNode(n); err != nil {
		return fmt.Errorf("node labels (node %s, name from %s): %w", ln.Name, ln.NameFrom, err)
	}
	stats.LabelsNodes = append(stats.LabelsNodes, ln)
	return nil
}

func listKind(apiVersion, kind string) bool {
	switch apiVersion + " " + kind {
	case "v1 List", "v1 NodeList", "v1 PodList":
		return true
	}
	if strings.HasSuffix(kind, "List") {
		if _, ok := jobKind(apiVersion, strings.TrimSuffix(kind, "List")); ok {
			return true
		}
	}
	if apiVersion == draVersion && draKinds[strings.TrimSuffix(kind, "List")] {
		return true
	}
	if trainjob.IsRuntime(apiVersion, strings.TrimSuffix(kind, "List")) {
		return true
	}
	return kind == "DeviceClassList" && deviceClassVersion(apiVersion)
}

// deviceClassVersion: the resource.k8s.io versions whose DeviceClass has
// spec.extendedResourceName (the only field read besides the name, the
// same in each).
func deviceClassVersion(apiVersion string) bool {
	switch apiVersion {
	case "resource.k8s.io/v1", "resource.k8s.io/v1beta2", "resource.k8s.io/v1beta1":
		return true
	}
	return false
}

func loadOne(b *Builder, tm *typeMeta, raw json.RawMessage, stats *LoadStats) error {
	stats.Objects++
	switch tm.APIVersion + " " + tm.Kind {
	case "v1 Node":
		var n corev1.Node
		if err := json.Unmarshal(raw, &n); err != nil {
			return err
		}
		return b.AddNode(&n)
	case "v1 Pod":
		var p corev1.Pod
		if err := json.Unmarshal(raw, &p); err != nil {
			return err
		}
		return b.AddPod(&p)
	case "v1 ConfigMap":
		// The Trainer's runtime snapshots; other ConfigMaps are skipped.
		var cm corev1.ConfigMap
		if err := json.Unmarshal(raw, &cm); err != nil {
			return err
		}
		if added, err := b.AddRuntimeSnapshot(&cm); added || err != nil {
			return err
		}
		stats.skip(tm.APIVersion, tm.Kind)
		return nil
	}
	if k, ok := jobKind(tm.APIVersion, tm.Kind); ok {
		j := k.New()
		if err := json.Unmarshal(raw, j); err != nil {
			return err
		}
		return addJob(b, j)
	}
	if tm.APIVersion == draVersion && draKinds[tm.Kind] {
		return loadDRA(b, tm.Kind, raw)
	}
	if trainjob.IsRuntime(tm.APIVersion, tm.Kind) {
		return loadRuntime(b, raw)
	}
	if tm.Kind == "DeviceClass" && deviceClassVersion(tm.APIVersion) {
		var dc resourcev1.DeviceClass
		if err := json.Unmarshal(raw, &dc); err != nil {
			return err
		}
		return b.AddDeviceClass(&dc)
	}
	stats.skip(tm.APIVersion, tm.Kind)
	return nil
}

// jobKind finds the supported job kind of an apiVersion and kind.
func jobKind(apiVersion, kind string) (kubeflow.Kind, bool) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return nil, false
	}
	return kubeflow.ByGVK(gv.WithKind(kind))
}

func addJob(b *Builder, obj kubeflow.Object) error {
	j, err := kubeflow.FromObject(obj)
	if err != nil {
		return err
	}
	return b.AddJob(j)
}

// readErr remembers the first error of r other than io.EOF.
type readErr struct {
	r   io.Reader
	err error
}

func (e *readErr) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF && e.err == nil {
		e.err = err
	}
	return n, err
}
