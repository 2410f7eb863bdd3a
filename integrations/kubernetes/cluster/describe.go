package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// ErrDescribe: the input is `kubectl describe` text, which drops fields
// (requests per container, tolerations, affinity) and rounds quantities:
// diagnose reads `kubectl get -o yaml` instead.
var ErrDescribe = errors.New("this is `kubectl describe` output, which diagnose cannot read (it leaves out fields and rounds quantities)")

// describeSniff is how much of an input is looked at to recognise
// `kubectl describe` text.
const describeSniff = 64 << 10

var (
	// describeKey is a top-level field of `kubectl describe` text: a
	// capitalised name, a colon, then spaces or the end of the line.
	describeKey = regexp.MustCompile(`(?m)^([A-Z][A-Za-z]*(?:[ -][A-Za-z]+)*):(?:[ \t]|$)`)
	// describeEvent is a row of an Events table ("Normal  Scheduled  2m
	// default-scheduler  ...") or its header.
	describeEvent = regexp.MustCompile(`(?m)^[ \t]*(?:(?:Normal|Warning)[ \t]{2,}[A-Za-z]+[ \t]{2,}\S|Type[ \t]+Reason[ \t]+Age[ \t]+From[ \t]+Message)`)
	describeName  = regexp.MustCompile(`(?m)^Name:[ \t]+(\S+)`)
	describeNS    = regexp.MustCompile(`(?m)^Namespace:[ \t]+(\S+)`)
	describeKind  = regexp.MustCompile(`(?m)^Kind:[ \t]+(\S+)`)
	// describeNodeLabel is a node label as describe prints it, indented
	// key=value.
	describeNodeLabel = regexp.MustCompile(`(?m)^[ \t]+(?:nvidia\.com/gpu\.[a-z.-]+|kubernetes\.io/hostname|node-role\.kubernetes\.io/[^=\s]*)=`)
)

// Fields of `kubectl describe` by the kind that prints them.
var (
	describeNodeKeys = map[string]bool{"Roles": true, "Taints": true, "Unschedulable": true, "Lease": true, "Addresses": true,
		"Capacity": true, "Allocatable": true, "System Info": true, "PodCIDR": true, "PodCIDRs": true, "ProviderID": true,
		"Non-terminated Pods": true, "Allocated resources": true}
	describePodKeys = map[string]bool{"Priority": true, "Service Account": true, "Node": true, "Start Time": true, "IP": true,
		"IPs": true, "Controlled By": true, "Containers": true, "Init Containers": true, "Volumes": true, "QoS Class": true,
		"Node-Selectors": true, "Tolerations": true}
	describeCommonKeys = map[string]bool{"Name": true, "Namespace": true, "Labels": true, "Annotations": true,
		"CreationTimestamp": true, "Conditions": true, "Events": true, "Status": true, "API Version": true, "Kind": true,
		"Metadata": true, "Spec": true}
)

// describeError recognises `kubectl describe` text at the head of an input
// and says which command prints what diagnose reads; nil for anything else
// (YAML and JSON objects name their apiVersion).
func describeError(head []byte) error {
	if bytes.Contains(head, []byte("apiVersion")) {
		return nil
	}
	node, pod, common := 0, 0, 0
	for _, m := range describeKey.FindAllSubmatch(head, -1) {
		switch {
		case describeNodeKeys[string(m[1])]:
			node++
		case describePodKeys[string(m[1])]:
			pod++
		case describeCommonKeys[string(m[1])]:
			common++
		}
	}
	if describeNodeLabel.Match(head) {
		node++
	}
	events := describeEvent.Match(head)
	if node+pod == 0 && common < 2 && !events {
		return nil
	}
	name, ns := "NAME", "NAMESPACE"
	if m := describeName.FindSubmatch(head); m != nil {
		name = string(m[1])
	}
	if m := describeNS.FindSubmatch(head); m != nil {
		ns = string(m[1])
	}
	var run string
	switch {
	case node > 0 && node >= pod:
		run = fmt.Sprintf("kubectl get node %s -o yaml > %s.yaml", name, name)
	case pod > 0:
		run = fmt.Sprintf("kubectl get pod %s -n %s -o yaml > %s.yaml (with kubectl get nodes -o yaml > nodes.yaml)", name, ns, name)
	default:
		kind := "pod"
		if m := describeKind.FindSubmatch(head); m != nil {
			kind = strings.ToLower(string(m[1]))
		}
		if events && name == "NAME" {
			// An Events table alone: the scheduler's message is in the
			// pod's PodScheduled condition.
			run = "kubectl get pod NAME -n NAMESPACE -o yaml > pod.yaml (its PodScheduled condition carries the scheduler's message), with kubectl get nodes -o yaml > nodes.yaml"
		} else {
			run = fmt.Sprintf("kubectl get %s %s -n %s -o yaml > %s.yaml (with kubectl get nodes -o yaml > nodes.yaml)", kind, name, ns, name)
		}
	}
	return fmt.Errorf("%w: run `%s` and pass that file with -f", ErrDescribe, run)
}
