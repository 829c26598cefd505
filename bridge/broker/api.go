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
	// LabelGeneration was on a Job of an earlier release: the Broker's
	// generation it was made for. Such a Job of the Broker's generation
	// is taken for current (AnnotationHash is compared otherwise).
	LabelGeneration = kube.Group + "/broker-generation"
	// AnnotationHash is on every object the controller makes: a hash of
	// what it wanted it to be. A different hash is one update (a
	// Deployment's rolls its pods; a Job, whose template cannot change,
	// is made anew); the same is no write, unless the object was edited
	// away from what the Broker wants (a Deployment's or Service's edit
	// is undone).
	AnnotationHash = kube.Group + "/broker-hash"
	// AnnotationGoneSince is on a workload whose device is gone: since
	// when (RFC 3339). The workload goes once that is the Broker's
	// deletionGraceSeconds ago, whichever bridge leads by then; it is
	// taken off when the device comes back.
	AnnotationGoneSince = kube.Group + "/device-gone-since"
	// FinalizerResult is on every Job the controller makes: a Job that
	// finished stays, deleted or not (its ttlSecondsAfterFinished, a
	// user's delete), as the record of its result, so that it is not run
	// again for its device until the Broker's template changes. The
	// controller takes it off when the Job is no longer wanted, or was
	// deleted before it finished.
	FinalizerResult = kube.Group + "/broker-result"
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

// State is a workload's, counted in the Broker's status.
type State string

const (
	Pending   State = "Pending"   // not made, or no pod of it runs yet
	Active    State = "Active"    // a pod of it runs
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

// Status is what the controller reports: counts and conditions, its
// size the same whatever the number of devices. What the controller
// must not lose with a status write that fails (a vanished device's
// time, a finished Job's result) is on the workloads themselves
// (AnnotationGoneSince, FinalizerResult).
type Status struct {
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Devices is how many devices the Broker selects now.
	Devices int `json:"devices"`
	// Workloads is how many workloads the Broker wants now: one per
	// selected device, or one for the pool. Pending, Active, Completed
	// and Failed count them by state; one whose device is gone is
	// counted until it goes.
	Workloads  int                `json:"workloads"`
	Pending    int                `json:"pending"`
	Active     int                `json:"active"`
	Completed  int                `json:"completed"`
	Failed     int                `json:"failed"`
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Conditions of a Broker's status.
const (
	// ConditionAccepted is False when the controller does not act on the
	// Broker: its namespace is not one it serves, or its spec cannot be
	// read or met.
	ConditionAccepted = "Accepted"
	// ConditionCreated is False when a workload the Broker wants could
	// not be created or updated; its message says which and why.
	ConditionCreated = "Created"
	// ConditionReady is True when every workload the Broker wants runs
	// or has finished; False says why not (its reason).
	ConditionReady = "Ready"
)

// Reasons of those conditions.
const (
	ReasonAccepted           = "Accepted"
	ReasonNamespaceNotServed = "NamespaceNotServed"
	ReasonInvalid            = "Invalid"
	ReasonCreated            = "Created"
	ReasonCreateFailed       = "CreateFailed"
	// ReasonNameTaken: an object of the workload's name exists that the
	// Broker does not own; it is left alone, and not asked for again
	// while it is there.
	ReasonNameTaken = "NameTaken"
	ReasonReady     = "Ready"
	// ReasonNoSuchPool: no node serves the pool (no Instance, node
	// resource or ResourceSlice of it).
	ReasonNoSuchPool = "NoSuchPool"
	// ReasonNoDeviceSelected: the pool has devices, the selector none.
	ReasonNoDeviceSelected = "NoDeviceSelected"
	// ReasonNotEnoughDevices: the Pool strategy's count is more than the
	// selected devices.
	ReasonNotEnoughDevices = "NotEnoughDevices"
	// ReasonNoDeviceClass: the DeviceClass a DRA pool's claims request
	// does not exist.
	ReasonNoDeviceClass = "NoDeviceClass"
	// ReasonTooManyContainers: a Deployment's pod has more containers,
	// each taking a slot, than its device has slots.
	ReasonTooManyContainers = "TooManyContainers"
	// ReasonPending: workloads are made, some with no pod running yet.
	ReasonPending = "Pending"
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
