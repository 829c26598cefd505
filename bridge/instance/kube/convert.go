package kube

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/cdiexec/cdi/bridge/instance"
)

// The Instance custom resource, as bridge/deploy/crd/instances.yaml
// defines it.
const (
	Group   = "cdi.local"
	Version = "v1alpha1"
	Kind    = "Instance"
)

// Resource is the Instances' group, version and resource.
var Resource = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "instances"}

// instanceSpec is the custom resource's spec.
type instanceSpec struct {
	ConfigurationName string            `json:"configurationName"`
	DeviceID          string            `json:"deviceId"`
	Nodes             []string          `json:"nodes,omitempty"`
	Shared            bool              `json:"shared"`
	Capacity          int               `json:"capacity"`
	DeviceUsage       map[string]string `json:"deviceUsage,omitempty"`
	Properties        map[string]string `json:"properties,omitempty"`
}

// toInstance reads an object of the custom resource.
func toInstance(obj *unstructured.Unstructured) (instance.Instance, error) {
	raw, _, err := unstructured.NestedMap(obj.Object, "spec")
	if err != nil {
		return instance.Instance{}, fmt.Errorf("instance %s: %w", obj.GetName(), err)
	}
	var s instanceSpec
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &s); err != nil {
		return instance.Instance{}, fmt.Errorf("instance %s: %w", obj.GetName(), err)
	}
	in := instance.Instance{
		Name: obj.GetName(), Config: s.ConfigurationName, DeviceID: s.DeviceID, Shared: s.Shared,
		Nodes: slices.Sorted(slices.Values(s.Nodes)), Capacity: s.Capacity, Usage: s.DeviceUsage,
		Properties: s.Properties, Version: obj.GetResourceVersion(),
	}
	if in.Usage == nil {
		in.Usage = map[string]string{}
	}
	return in, nil
}

// toObject writes in as an object of the custom resource in namespace,
// carrying in.Version as its resourceVersion.
func toObject(in instance.Instance, namespace string) (*unstructured.Unstructured, error) {
	s := instanceSpec{
		ConfigurationName: in.Config, DeviceID: in.DeviceID, Nodes: in.Nodes, Shared: in.Shared,
		Capacity: in.Capacity, DeviceUsage: in.Usage, Properties: in.Properties,
	}
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&s)
	if err != nil {
		return nil, fmt.Errorf("instance %s: %w", in.Name, err)
	}
	obj := &unstructured.Unstructured{Object: map[string]any{"spec": raw}}
	obj.SetAPIVersion(Group + "/" + Version)
	obj.SetKind(Kind)
	obj.SetName(in.Name)
	obj.SetNamespace(namespace)
	obj.SetResourceVersion(in.Version)
	return obj, nil
}
