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

// instanceStatus is a summary of the spec that the bridge writes with it,
// in the same resourceVersion-guarded write, for people and monitoring to
// read: `kubectl get cdii` prints it (the CRD's printer columns), since a
// column's JSONPath cannot count the held slots of deviceUsage. It is
// never read back: the spec is the truth.
type instanceStatus struct {
	// Used is the number of slots held, at either level, including held
	// slots above a capacity that shrank.
	Used int `json:"used"`
	// Slots is "<used>/<capacity>".
	Slots string `json:"slots"`
}

func statusOf(in instance.Instance) instanceStatus {
	used := 0
	for _, v := range in.Usage {
		if v != "" {
			used++
		}
	}
	return instanceStatus{Used: used, Slots: fmt.Sprintf("%d/%d", used, in.Capacity)}
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
// with its status summary, carrying in.Version as its resourceVersion.
func toObject(in instance.Instance, namespace string) (*unstructured.Unstructured, error) {
	s := instanceSpec{
		ConfigurationName: in.Config, DeviceID: in.DeviceID, Nodes: in.Nodes, Shared: in.Shared,
		Capacity: in.Capacity, DeviceUsage: in.Usage, Properties: in.Properties,
	}
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&s)
	if err != nil {
		return nil, fmt.Errorf("instance %s: %w", in.Name, err)
	}
	status, err := runtime.DefaultUnstructuredConverter.ToUnstructured(new(statusOf(in)))
	if err != nil {
		return nil, fmt.Errorf("instance %s: %w", in.Name, err)
	}
	obj := &unstructured.Unstructured{Object: map[string]any{"spec": raw, "status": status}}
	obj.SetAPIVersion(Group + "/" + Version)
	obj.SetKind(Kind)
	obj.SetName(in.Name)
	obj.SetNamespace(namespace)
	obj.SetLabels(map[string]string{LabelPool: LabelValue(in.Config)})
	obj.SetResourceVersion(in.Version)
	return obj, nil
}
