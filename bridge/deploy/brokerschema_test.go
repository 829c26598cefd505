package deploy

import (
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/cdiexec/cdi/bridge/broker"
	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
)

// brokerPod is a pod template's spec, in YAML, that a Broker may carry.
const brokerPod = `{spec: {restartPolicy: Never, containers: [{name: c, image: i}]}}`

// TestBrokerSchema posts Brokers to a real API server with the CRD:
// a malformed Job, Deployment or Service is refused on write, with a
// message naming the field; a well-formed one, as the controller's Go
// types write it, is taken; and the status and kubectl's columns are
// the ones the controller writes and reads.
func TestBrokerSchema(t *testing.T) {
	env := apitest.Start(t, apitest.Options{})
	if err := apitest.InstallCRD(t.Context(), env.Config, "crd/brokers.yaml"); err != nil {
		t.Fatal(err)
	}
	ns := env.Namespace(t)
	admin, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	brokers := admin.Resource(brokersResource).Namespace(ns)

	t.Run("malformed Brokers are refused", func(t *testing.T) {
		for _, tc := range []struct{ name, spec, want string }{
			{"backoff-string", `{job: {backoffLimit: "two", template: ` + brokerPod + `}}`,
				`spec.job.backoffLimit: Invalid value: "string": spec.job.backoffLimit in body must be of type integer: "string"`},
			{"strategy-sideways", `{deployment: {strategy: {type: Sideways}, template: ` + brokerPod + `}}`,
				`spec.deployment.strategy.type: Unsupported value: "Sideways": supported values: "Recreate", "RollingUpdate"`},
			{"backoff-negative", `{job: {backoffLimit: -1, template: ` + brokerPod + `}}`,
				`spec.job.backoffLimit: Invalid value: -1: spec.job.backoffLimit in body should be greater than or equal to 0`},
			{"backoff-int64", `{job: {backoffLimit: 3000000000, template: ` + brokerPod + `}}`,
				`spec.job.backoffLimit: Invalid value: 3000000000: spec.job.backoffLimit in body should be less than or equal to 2147483647`},
			{"parallelism-string", `{job: {parallelism: "2", template: ` + brokerPod + `}}`,
				`spec.job.parallelism: Invalid value: "string"`},
			{"deadline-zero", `{job: {activeDeadlineSeconds: 0, template: ` + brokerPod + `}}`,
				`spec.job.activeDeadlineSeconds: Invalid value: 0: spec.job.activeDeadlineSeconds in body should be greater than or equal to 1`},
			{"completion-mode", `{job: {completionMode: Sometimes, template: ` + brokerPod + `}}`,
				`spec.job.completionMode: Unsupported value: "Sometimes": supported values: "NonIndexed", "Indexed"`},
			{"suspend-string", `{job: {suspend: "yes", template: ` + brokerPod + `}}`,
				`spec.job.suspend: Invalid value: "string": spec.job.suspend in body must be of type boolean: "string"`},
			{"replacement", `{job: {podReplacementPolicy: Never, template: ` + brokerPod + `}}`,
				`spec.job.podReplacementPolicy: Unsupported value: "Never": supported values: "TerminatingOrFailed", "Failed"`},
			{"job-selector", `{job: {selector: {matchLabels: {a: b}}, template: ` + brokerPod + `}}`,
				`spec.job.selector: Forbidden: the bridge labels the pods and selects them itself`},
			{"manual-selector", `{job: {manualSelector: true, template: ` + brokerPod + `}}`,
				`spec.job.manualSelector: Forbidden: the bridge labels the pods and selects them itself`},
			{"job-no-template", `{job: {backoffLimit: 1}}`,
				`spec.job.template: Required value`},
			{"job-template-list", `{job: {template: []}}`,
				`spec.job.template: Invalid value: "array": spec.job.template in body must be of type object: "array"`},
			{"job-no-pod", `{job: {template: {metadata: {labels: {a: b}}}}}`,
				`spec.job.template.spec: Required value`},
			{"deployment-no-pod", `{deployment: {template: {metadata: {labels: {a: b}}}}}`,
				`spec.deployment.template.spec: Required value`},
			{"replicas-string", `{deployment: {replicas: "3", template: ` + brokerPod + `}}`,
				`spec.deployment.replicas: Invalid value: "string"`},
			{"port-zero", `{deployment: {template: ` + brokerPod + `}, services: {pool: {ports: [{port: 0}]}}}`,
				`spec.services.pool.ports[0].port: Invalid value: 0: spec.services.pool.ports[0].port in body should be greater than or equal to 1`},
			{"port-high", `{deployment: {template: ` + brokerPod + `}, services: {perDevice: {ports: [{port: 70000}]}}}`,
				`spec.services.perDevice.ports[0].port: Invalid value: 70000: spec.services.perDevice.ports[0].port in body should be less than or equal to 65535`},
			{"port-missing", `{deployment: {template: ` + brokerPod + `}, services: {perDevice: {ports: [{name: http}]}}}`,
				`spec.services.perDevice.ports[0].port: Required value`},
			{"port-string", `{deployment: {template: ` + brokerPod + `}, services: {pool: {ports: [{port: http}]}}}`,
				`spec.services.pool.ports[0].port: Invalid value: "string"`},
			{"service-type", `{deployment: {template: ` + brokerPod + `}, services: {pool: {type: Internal}}}`,
				`spec.services.pool.type: Unsupported value: "Internal": supported values: "ClusterIP", "NodePort", "LoadBalancer", "ExternalName"`},
		} {
			spec := map[string]any{}
			if err := yaml.Unmarshal([]byte(tc.spec), &spec); err != nil {
				t.Fatal(err)
			}
			spec["pool"] = "camera-endpoint"
			_, err := brokers.Create(t.Context(), brokerObject(tc.name, spec), metav1.CreateOptions{})
			t.Logf("%s: %v", tc.name, err)
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Broker %s %s: %v\nwant it refused with %q", tc.name, tc.spec, err, tc.want)
			}
		}
	})

	// Brokers as bridge/broker's and bridge/e2e/node's tests make them,
	// through the controller's Go types, and one with every field the
	// schema types.
	tpl := corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
		Containers: []corev1.Container{{Name: "c", Image: "i"}}}}
	valid := map[string]broker.Spec{
		"jobs": {Pool: "camera-endpoint", DeletionGraceSeconds: ptr.To(int64(60)),
			Job: &batchv1.JobSpec{BackoffLimit: ptr.To(int32(0)), Template: tpl}},
		"frames": {Pool: "camera-endpoint",
			Deployment: &broker.DeploymentTemplate{Replicas: ptr.To(int32(5)), Template: tpl},
			Services: &broker.Services{PerDevice: &corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 8554}}},
				Pool: &corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Port: 8554}}}}},
		"pair": {Pool: "camera-endpoint", Strategy: broker.Pool, Count: 2,
			Deployment: &broker.DeploymentTemplate{Template: tpl}},
		"consoles": {Pool: "tty-generic", Selector: &broker.Selector{DeviceIDs: []string{"tty13"}},
			Job: &batchv1.JobSpec{BackoffLimit: ptr.To(int32(0)), Template: tpl}},
		"every-field": {Pool: "camera-endpoint",
			Job: &batchv1.JobSpec{Parallelism: ptr.To(int32(2)), Completions: ptr.To(int32(4)),
				ActiveDeadlineSeconds: ptr.To(int64(600)), BackoffLimit: ptr.To(int32(0)),
				BackoffLimitPerIndex: ptr.To(int32(1)), MaxFailedIndexes: ptr.To(int32(2)),
				TTLSecondsAfterFinished: ptr.To(int32(0)), CompletionMode: ptr.To(batchv1.IndexedCompletion),
				Suspend: ptr.To(false), PodReplacementPolicy: ptr.To(batchv1.Failed), ManualSelector: ptr.To(false),
				PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{Action: batchv1.PodFailurePolicyActionIgnore,
					OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}}}}},
				Template: tpl},
			Services: &broker.Services{Pool: &corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort,
				Ports: []corev1.ServicePort{{Name: "rtsp", Protocol: corev1.ProtocolUDP, Port: 8554, TargetPort: intstr.FromString("rtsp")}}}}},
		"rolling": {Pool: "camera-endpoint",
			Deployment: &broker.DeploymentTemplate{Replicas: ptr.To(int32(0)), Template: tpl,
				Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
					RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: ptr.To(intstr.FromString("50%"))}}}},
	}
	t.Run("well-formed Brokers are taken as they are", func(t *testing.T) {
		for name, spec := range valid {
			obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&spec)
			if err != nil {
				t.Fatal(err)
			}
			got, err := brokers.Create(t.Context(), brokerObject(name, obj), metav1.CreateOptions{})
			if err != nil {
				t.Errorf("Broker %s: %v", name, err)
				continue
			}
			// Nothing pruned: what the Go types wrote is read back, the
			// strategy defaulted.
			want := normalize(t, obj)
			if want["strategy"] == nil {
				want["strategy"] = string(broker.PerDevice)
			}
			if !reflect.DeepEqual(got.Object["spec"], want) {
				t.Errorf("Broker %s: spec read back\n%v\nwant\n%v", name, got.Object["spec"], want)
			}
		}
	})

	t.Run("the status and kubectl's columns", func(t *testing.T) {
		b, err := brokers.Get(t.Context(), "jobs", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		status := map[string]any{"observedGeneration": int64(1), "devices": int64(3), "workloads": int64(3),
			"pending": int64(1), "active": int64(1), "completed": int64(1), "failed": int64(0),
			"conditions": []any{
				condition("Accepted", "True", "Accepted"),
				condition("Created", "True", "Created"),
				condition("Ready", "False", "Pending"),
			}}
		b.Object["status"] = status
		got, err := brokers.UpdateStatus(t.Context(), b, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if want := normalize(t, status); !reflect.DeepEqual(got.Object["status"], want) {
			t.Errorf("status read back\n%v\nwant\n%v", got.Object["status"], want)
		}
		table := brokersTable(t, env.Config, "/apis/cdi.local/v1alpha1/namespaces/"+ns+"/brokers/jobs")
		var names []string
		for _, c := range table.ColumnDefinitions {
			names = append(names, c.Name)
		}
		want := []string{"Name", "Pool", "Strategy", "Devices", "Workloads", "Active", "Completed", "Failed", "Ready", "Reason", "Age"}
		if !reflect.DeepEqual(names, want) {
			t.Fatalf("columns %v, want %v", names, want)
		}
		if len(table.Rows) != 1 {
			t.Fatalf("%d rows, want 1", len(table.Rows))
		}
		cells := table.Rows[0].Cells
		wantCells := []any{"jobs", "camera-endpoint", "PerDevice", 3.0, 3.0, 1.0, 1.0, 0.0, "False", "Pending"}
		if len(cells) != len(want) || !reflect.DeepEqual(cells[:len(wantCells)], wantCells) {
			t.Errorf("cells %#v, want %#v and an age", cells, wantCells)
		}
	})
}

// brokerObject is a Broker named name of spec.
func brokerObject(name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "cdi.local/v1alpha1", "kind": "Broker",
		"metadata": map[string]any{"name": name}, "spec": spec}}
}

// condition is a status condition as metav1.Condition writes it.
func condition(typ, status, reason string) map[string]any {
	return map[string]any{"type": typ, "status": status, "reason": reason, "message": "",
		"lastTransitionTime": "2026-01-02T03:04:05Z", "observedGeneration": int64(1)}
}

// normalize is v as read back from JSON: its numbers int64 or float64.
func normalize(t *testing.T, v map[string]any) map[string]any {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]any{}
	if err := utiljson.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// brokersTable GETs path as the meta.k8s.io Table kubectl get shows.
func brokersTable(t *testing.T, cfg *rest.Config, path string) metav1.Table {
	t.Helper()
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, cfg.Host+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %s %v", path, resp.Status, data, err)
	}
	var table metav1.Table
	if err := json.Unmarshal(data, &table); err != nil {
		t.Fatal(err)
	}
	return table
}
