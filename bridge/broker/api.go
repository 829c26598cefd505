package broker

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/cdiexec/cdi/bridge/instance/kube"
)

// The Broker custom resource, as bridge/deploy/crd/brokers.yaml defines
// it: in the Instances' group and version.
const Kind = "Broker"

// Resource is the Brokers' group, version and resource.
var Resource = schema.GroupVersionResource{Group: kube.Group, Version: kube.Version, Resource: "brokers"}

// Labels of every object the controller makes, and of the pods of its
// workloads. Their values are label values: a Broker's name, a pool's
// (kube.LabelValue), a device's Instance name, a workload's name.
const (
	LabelBroker   = kube.Group + "/broker"
	LabelPool     = kube.LabelPool
	LabelDevice   = kube.Group + "/device"
	LabelWorkload = kube.Group + "/workload"
	// LabelGeneration is on a Job: the Broker's generation it was made
	// for. A Job of an older generation is replaced.
	LabelGeneration = kube.Group + "/broker-generation"
	// AnnotationHash is on a Deployment, Service and claim template: a
	// hash of what the controller wanted it to be. A different hash is
	// one update (a Deployment's rolls its pods); the same is no write.
	AnnotationHash = kube.Group + "/broker-hash"
)

// Strategy says how many workloads a Broker wants.
type Strategy string

const (
	// PerDevice is a workload for each device the Broker selects: the
	// proposal's 5A and 6A with Jobs, 4A and 5A with Deployments.
	PerDevice Strategy = "PerDevice"
	// Pool is one workload using Count devices of the pool: 4B and 5B.
	Pool Strategy = "Pool"
)

// State is a workload's, in the Broker's status.
type State string

const (
	Active    State = "Active"
	Completed State = "Completed" // a Job that succeeded
	Failed    State = "Failed"    // a Job that failed
)

// Broker is the custom resource: what workloads to run for which devices
// of a pool.
type Broker struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              Spec   `json:"spec"`
	Status            Status `json:"status,omitempty"`
}

// Spec is a Broker's spec; bridge/deploy/crd/brokers.yaml documents each
// field.
type Spec struct {
	Pool     string    `json:"pool"`
	Selector *Selector `json:"selector,omitempty"`
	Strategy Strategy  `json:"strategy,omitempty"`
	// Count is the Pool strategy's devices per workload; 0 is 1.
	Count int `json:"count,omitempty"`
	// Job or Deployment: exactly one is set.
	Job        *batchv1.JobSpec    `json:"job,omitempty"`
	Deployment *DeploymentTemplate `json:"deployment,omitempty"`
	Services   *Services           `json:"services,omitempty"`
	// DeviceClassName is what a DRA pool's claims request; empty is
	// "<pool>.<domain>".
	DeviceClassName string `json:"deviceClassName,omitempty"`
	// DeletionGraceSeconds is how long a vanished device keeps its
	// workloads; nil is DefaultDeletionGrace.
	DeletionGraceSeconds *int64 `json:"deletionGraceSeconds,omitempty"`
}

// Selector picks devices of the pool: all of them when empty.
type Selector struct {
	// DeviceIDs, if any, are the inventory ids a device must have one of.
	DeviceIDs []string `json:"deviceIds,omitempty"`
	// Properties a device must have, each with exactly this value.
	Properties map[string]string `json:"properties,omitempty"`
}

// DeploymentTemplate is the Deployment made for each device (or the
// pool): its pods' template and how many.
type DeploymentTemplate struct {
	// Replicas is at most the device's capacity with PerDevice; nil is 1.
	Replicas *int32                    `json:"replicas,omitempty"`
	Strategy appsv1.DeploymentStrategy `json:"strategy,omitempty"`
	Template corev1.PodTemplateSpec    `json:"template"`
}

// Services are Akri's instance and configuration services.
type Services struct {
	// PerDevice is a Service for each device's workload (PerDevice only).
	PerDevice *corev1.ServiceSpec `json:"perDevice,omitempty"`
	// Pool is one Service over every workload of the Broker.
	Pool *corev1.ServiceSpec `json:"pool,omitempty"`
}

// Status is what the controller reports.
type Status struct {
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Devices is how many devices the Broker selects now.
	Devices int `json:"devices"`
	// Active, Completed and Failed count Workloads by state.
	Active     int                `json:"active"`
	Completed  int                `json:"completed"`
	Failed     int                `json:"failed"`
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Workloads are the Broker's, by device (Akri's
	// configurationDeploymentStatuses), sorted by device.
	Workloads []WorkloadStatus `json:"workloads,omitempty"`
}

// WorkloadStatus is one workload of the Broker.
type WorkloadStatus struct {
	// Device is its device's Instance name, empty for the pool's one
	// workload.
	Device   string `json:"device,omitempty"`
	DeviceID string `json:"deviceId,omitempty"`
	// Node is a device's node, for a device only one node sees.
	Node string `json:"node,omitempty"`
	Kind string `json:"kind"`
	Name string `json:"name"`
	// Generation is the Broker's generation the workload was made for.
	Generation int64 `json:"generation"`
	State      State `json:"state"`
	// GoneSince is when its device was last seen vanishing: the workload
	// goes once that is DeletionGraceSeconds ago.
	GoneSince *metav1.Time `json:"goneSince,omitempty"`
}

// Conditions of a Broker's status.
const (
	// ConditionAccepted is False when the controller does not act on the
	// Broker: its namespace is not one it serves, or its spec cannot be
	// met.
	ConditionAccepted = "Accepted"
	// ConditionCreated is False when a workload the Broker wants could
	// not be created or updated; its message says which and why.
	ConditionCreated = "Created"
)

// Reasons of those conditions.
const (
	ReasonAccepted           = "Accepted"
	ReasonNamespaceNotServed = "NamespaceNotServed"
	ReasonInvalid            = "Invalid"
	ReasonCreated            = "Created"
	ReasonCreateFailed       = "CreateFailed"
	// ReasonNameTaken: an object of the workload's name exists that the
	// Broker does not own; it is left alone.
	ReasonNameTaken = "NameTaken"
)

// fromUnstructured reads a Broker object.
func fromUnstructured(obj *unstructured.Unstructured) (*Broker, error) {
	b := &Broker{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, b); err != nil {
		return nil, fmt.Errorf("Broker %s/%s: %w", obj.GetNamespace(), obj.GetName(), err)
	}
	return b, nil
}

// strategy is the spec's, PerDevice when unset.
func (s *Spec) strategy() Strategy {
	if s.Strategy == "" {
		return PerDevice
	}
	return s.Strategy
}

// count is the Pool strategy's devices per workload.
func (s *Spec) count() int { return max(s.Count, 1) }

// kind is the workloads' kind.
func (s *Spec) kind() string {
	if s.Job != nil {
		return "Job"
	}
	return "Deployment"
}
