package broker

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/cdiexec/cdi/bridge/dradevices"
	"github.com/cdiexec/cdi/bridge/instance/kube"
)

// claimName is the pod's name for the claim of its device(s), in a pool
// served through DRA.
const claimName = "cdi-devices"

// maxName is the longest name of an object the controller makes: a label
// value's and a Service's (a DNS label).
const maxName = 63

// maxPrefix keeps a device's workload name, "<prefix>-<10 hex digits>",
// within maxName.
const maxPrefix = maxName - 11

// workloadName is the name of the Broker's workload (and Service and
// claim template) for the device of key, or for the pool when key is
// empty. It is decided by the Broker and the device alone, so that a
// second create of it, by a restarted or a new leader, fails instead of
// making a twin; and two Brokers' names never meet: a Broker's name too
// long to precede the device's hash whole is cut and given a hash of its
// own (brokerPrefix).
func workloadName(broker, key string) string {
	if key == "" {
		return brokerPrefix(broker, maxName)
	}
	return strings.TrimRight(brokerPrefix(broker, maxPrefix), "-") + "-" + hex10(key)
}

// brokerPrefix is broker if it has at most room characters, else its
// first characters and a hash of it all, room characters in all.
func brokerPrefix(broker string, room int) string {
	if len(broker) <= room {
		return broker
	}
	return strings.TrimRight(broker[:room-11], "-") + "-" + hex10(broker)
}

// hex10 is the first 10 hex digits of s's SHA-256.
func hex10(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:10]
}

// hashOf is a short hash of v as JSON: what AnnotationHash holds.
func hashOf(v any) string {
	data, _ := json.Marshal(v)
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}

// unit is one workload a Broker wants: a device's, or the pool's.
type unit struct {
	name   string
	device *Device // nil for the pool's
	// devices is how many devices the workload uses.
	devices int
}

// key is the unit's device's Instance name, empty for the pool's.
func (u unit) key() string {
	if u.device == nil {
		return ""
	}
	return u.device.Key
}

// builder makes the objects a Broker wants.
type builder struct {
	// domain is the bridge's: the resources' prefix, and the DRA driver.
	domain string
	// dra are the pools served through DRA.
	dra map[string]bool
}

// meta is the metadata of an object of the Broker's unit u, named name.
func (b builder) meta(br *Broker, u unit, name string) metav1.ObjectMeta {
	labels := map[string]string{LabelBroker: br.Name, LabelPool: kube.LabelValue(br.Spec.Pool), LabelWorkload: u.name}
	if u.device != nil {
		labels[LabelDevice] = u.device.Key
	}
	return metav1.ObjectMeta{Name: name, Namespace: br.Namespace, Labels: labels, OwnerReferences: []metav1.OwnerReference{{
		APIVersion: Resource.GroupVersion().String(), Kind: Kind, Name: br.Name, UID: br.UID, Controller: ptr.To(true),
	}}}
}

// job is u's Job, with the finalizer that keeps it, finished, as the
// record of its result (FinalizerResult). Its hash is of what makes it,
// so that only a change of that makes it anew.
func (b builder) job(br *Broker, u unit) *batchv1.Job {
	spec := br.Spec.Job.DeepCopy()
	b.podTemplate(br, u, &spec.Template)
	j := &batchv1.Job{ObjectMeta: b.meta(br, u, u.name), Spec: *spec}
	j.Finalizers = []string{FinalizerResult}
	j.Annotations = map[string]string{AnnotationHash: hashOf([]any{j.Labels, j.Spec})}
	return j
}

// deployment is u's Deployment. Of a device, it runs at most as many
// pods as the device's slots allow (replicas): more would wait for ever.
func (b builder) deployment(br *Broker, u unit) *appsv1.Deployment {
	tpl := br.Spec.Deployment
	replicas := b.replicas(br, u)
	d := &appsv1.Deployment{ObjectMeta: b.meta(br, u, u.name), Spec: appsv1.DeploymentSpec{
		Replicas: &replicas, Strategy: *tpl.Strategy.DeepCopy(), Template: *tpl.Template.DeepCopy(),
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{LabelWorkload: u.name}},
	}}
	b.podTemplate(br, u, &d.Spec.Template)
	d.Annotations = map[string]string{AnnotationHash: hashOf([]any{d.Labels, d.Spec})}
	return d
}

// replicas is how many pods u's Deployment runs: the template's, and of
// a device served by device plugins at most its slots divided by the
// containers of a pod, each of which takes one (podTemplate); through
// DRA the pod's containers share its one claim.
func (b builder) replicas(br *Broker, u unit) int32 {
	want := ptr.Deref(br.Spec.Deployment.Replicas, 1)
	if u.device == nil {
		return want
	}
	perPod := 1
	if !b.dra[br.Spec.Pool] {
		perPod = max(len(br.Spec.Deployment.Template.Spec.Containers), 1)
	}
	return min(want, int32(u.device.Capacity/perPod))
}

// service is a Service of the Broker's, named name, over the pods
// selector selects.
func (b builder) service(br *Broker, u unit, name string, spec *corev1.ServiceSpec, selector map[string]string) *corev1.Service {
	s := &corev1.Service{ObjectMeta: b.meta(br, u, name), Spec: *spec.DeepCopy()}
	s.Spec.Selector = selector
	s.Annotations = map[string]string{AnnotationHash: hashOf([]any{s.Labels, s.Spec})}
	return s
}

// claimTemplate is the template of u's pods' claims, for a pool served
// through DRA: the device by its pool and id, or Count devices of the
// pool that the Broker's selector picks.
func (b builder) claimTemplate(br *Broker, u unit) *resourceapi.ResourceClaimTemplate {
	req := resourceapi.ExactDeviceRequest{DeviceClassName: b.deviceClass(br),
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: b.celSelector(br, u)}}}}
	if u.devices > 1 {
		req.AllocationMode, req.Count = resourceapi.DeviceAllocationModeExactCount, int64(u.devices)
	}
	t := &resourceapi.ResourceClaimTemplate{ObjectMeta: b.meta(br, u, u.name), Spec: resourceapi.ResourceClaimTemplateSpec{
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "devices", Exactly: &req}},
		}},
	}}
	t.Annotations = map[string]string{AnnotationHash: hashOf([]any{t.Labels, t.Spec})}
	return t
}

// deviceClass is the class a DRA pool's claims request.
func (b builder) deviceClass(br *Broker) string {
	if br.Spec.DeviceClassName != "" {
		return br.Spec.DeviceClassName
	}
	return br.Spec.Pool + "." + b.domain
}

// cIdentifier is what a published attribute's name is
// (dradevices.Device publishes no other property).
var cIdentifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// celSelector selects the bridge's devices of u: of the Broker's pool, by
// id for a device, else by the Broker's selector.
func (b builder) celSelector(br *Broker, u unit) string {
	attr := func(name string) string { return "device.attributes[" + strconv.Quote(b.domain) + "]." + name }
	terms := []string{"device.driver == " + strconv.Quote(b.domain), attr(dradevices.AttrPool) + " == " + strconv.Quote(br.Spec.Pool)}
	if u.device != nil {
		return strings.Join(append(terms, attr(dradevices.AttrID)+" == "+strconv.Quote(u.device.ID)), " && ")
	}
	if s := br.Spec.Selector; s != nil {
		if len(s.DeviceIDs) > 0 {
			ids := make([]string, len(s.DeviceIDs))
			for i, id := range s.DeviceIDs {
				ids[i] = strconv.Quote(id)
			}
			terms = append(terms, attr(dradevices.AttrID)+" in ["+strings.Join(ids, ", ")+"]")
		}
		for _, k := range slices.Sorted(maps.Keys(s.Properties)) {
			if !cIdentifier.MatchString(k) {
				return "false" // no published device has such a property
			}
			terms = append(terms, "has("+attr(k)+") && "+attr(k)+" == "+strconv.Quote(s.Properties[k]))
		}
	}
	return strings.Join(terms, " && ")
}

// podTemplate gives the pods of u the labels of the Broker and of u, and
// their devices: to every container, the device's Instance-level
// resource (one slot each) or Count of the pool's Configuration-level
// one; or, in a pool served through DRA, the pod's claim of the
// device(s), which every container shares, and for a device only one
// node sees, that node.
func (b builder) podTemplate(br *Broker, u unit, tpl *corev1.PodTemplateSpec) {
	labels := maps.Clone(tpl.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, b.meta(br, u, u.name).Labels)
	tpl.Labels = labels
	spec := &tpl.Spec
	if b.dra[br.Spec.Pool] {
		spec.ResourceClaims = append(spec.ResourceClaims, corev1.PodResourceClaim{Name: claimName, ResourceClaimTemplateName: ptr.To(u.name)})
		for i := range spec.Containers {
			spec.Containers[i].Resources.Claims = append(spec.Containers[i].Resources.Claims, corev1.ResourceClaim{Name: claimName})
		}
		if u.device != nil && u.device.Node != "" {
			pinToNode(spec, u.device.Node)
		}
		return
	}
	name := corev1.ResourceName(b.domain + "/" + br.Spec.Pool)
	if u.device != nil {
		name = corev1.ResourceName(b.domain + "/" + u.device.Key)
	}
	amount := *resource.NewQuantity(int64(u.devices), resource.DecimalSI)
	for i := range spec.Containers {
		r := &spec.Containers[i].Resources
		if r.Limits == nil {
			r.Limits = corev1.ResourceList{}
		}
		if r.Requests == nil {
			r.Requests = corev1.ResourceList{}
		}
		r.Limits[name], r.Requests[name] = amount, amount
	}
}

// pinToNode adds to every term of the pod's required node affinity that
// the node be node (by name, as the DaemonSet controller pins its pods),
// keeping what else the template asks of the node.
func pinToNode(spec *corev1.PodSpec, node string) {
	if spec.Affinity == nil {
		spec.Affinity = &corev1.Affinity{}
	}
	if spec.Affinity.NodeAffinity == nil {
		spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	required := spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	if required == nil || len(required.NodeSelectorTerms) == 0 {
		required = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{}}}
	}
	byName := corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}
	for i := range required.NodeSelectorTerms {
		term := &required.NodeSelectorTerms[i]
		term.MatchFields = append(slices.DeleteFunc(term.MatchFields, func(r corev1.NodeSelectorRequirement) bool {
			return r.Key == "metadata.name"
		}), byName)
	}
	spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = required
}
