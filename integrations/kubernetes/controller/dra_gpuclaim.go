package controller

import (
	"context"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rankgate/rankgate/integrations/kubernetes/devicesource/dra"
	"github.com/rankgate/rankgate/topology"
)

// gpuClaim tells the mutating webhook whether the pod resource claim pc
// of a pod in namespace ns is served by NVIDIA's GPU driver, from the
// cached claims, templates and DeviceClasses: an allocated claim holds a
// device of that driver; otherwise a request of the claim (or of the
// template it is made from) asks a DeviceClass whose selectors name the
// driver or that serves a GPU extended resource, or selects devices
// naming the driver itself. A claim or template the cache does not hold
// (yet) is no GPU's: its pod is not gated by claim.
func (d *draCaches) gpuClaim(ns string, pc corev1.PodResourceClaim) bool {
	if !d.served || d.claims == nil || d.templates == nil {
		return false
	}
	var dc *resourcev1.DeviceClaim
	switch {
	case pc.ResourceClaimTemplateName != nil:
		o, ok, err := d.templates.GetByKey(ns + "/" + *pc.ResourceClaimTemplateName)
		if err != nil || !ok {
			return false
		}
		dc = &o.(*resourcev1.ResourceClaimTemplate).Spec.Spec.Devices
	case pc.ResourceClaimName != nil:
		o, ok, err := d.claims.GetByKey(ns + "/" + *pc.ResourceClaimName)
		if err != nil || !ok {
			return false
		}
		claim := o.(*resourcev1.ResourceClaim)
		if a := claim.Status.Allocation; a != nil {
			for _, r := range a.Devices.Results {
				if r.Driver == dra.Driver {
					return true
				}
			}
			return false
		}
		dc = &claim.Spec.Devices
	default:
		return false
	}
	for _, req := range dc.Requests {
		if req.Exactly != nil && d.gpuRequest(req.Exactly.DeviceClassName, req.Exactly.Selectors) {
			return true
		}
		for _, sub := range req.FirstAvailable {
			if d.gpuRequest(sub.DeviceClassName, sub.Selectors) {
				return true
			}
		}
	}
	return false
}

// gpuRequest: a request of DeviceClass class with selectors asks for
// devices of NVIDIA's GPU driver.
func (d *draCaches) gpuRequest(class string, selectors []resourcev1.DeviceSelector) bool {
	if namesDriver(selectors) {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	dcl := &resourcev1.DeviceClass{}
	if err := d.reader.Get(ctx, types.NamespacedName{Name: class}, dcl); err != nil {
		return false
	}
	if n := dcl.Spec.ExtendedResourceName; n != nil && topology.IsGPUResource(*n) {
		return true
	}
	return namesDriver(dcl.Spec.Selectors)
}

// namesDriver: a CEL selector names NVIDIA's GPU driver (device.driver ==
// "gpu.nvidia.com", or an attribute of its domain).
func namesDriver(selectors []resourcev1.DeviceSelector) bool {
	for _, s := range selectors {
		if s.CEL != nil && strings.Contains(s.CEL.Expression, dra.Driver) {
			return true
		}
	}
	return false
}
