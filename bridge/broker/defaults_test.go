package broker

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// withServerDefaults takes what the API server fills in (zero integers
// of structs, a zero IntOrString) and leaves what the Broker set: an
// integer or IntOrString behind a pointer, a named port, a nonzero
// value.
func TestWithServerDefaults(t *testing.T) {
	tests := []struct {
		name       string
		want, have corev1.ServiceSpec
		same       bool
	}{
		{name: "a targetPort and a nodePort filled in",
			want: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
			have: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80), NodePort: 30080, Protocol: "TCP"}}},
			same: true},
		{name: "an edited port",
			want: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
			have: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 9999, TargetPort: intstr.FromInt32(9999)}}}},
		{name: "a named targetPort made a number",
			want: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromString("http")}}},
			have: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}},
		{name: "a numbered targetPort made a name",
			want: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
			have: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromString("http")}}}},
		{name: "a port more",
			want: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
			have: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80)}, {Port: 81}}},
			same: true}, // DeepDerivative: the Broker's one port is there
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.want.DeepCopy()
			withServerDefaults(want, &tc.have)
			if got := equality.Semantic.DeepDerivative(*want, tc.have); got != tc.same {
				t.Errorf("the same after the defaults: %v, want %v (want %+v, have %+v)", got, tc.same, want.Ports, tc.have.Ports)
			}
		})
	}
}

// A pointer's integer and IntOrString are the Broker's values: an edit
// of replicas or maxUnavailable is seen.
func TestWithServerDefaultsKeepsPointers(t *testing.T) {
	want := appsv1.DeploymentSpec{Replicas: ptr.To[int32](0), Strategy: appsv1.DeploymentStrategy{
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: ptr.To(intstr.FromInt32(0))}}}
	have := appsv1.DeploymentSpec{Replicas: ptr.To[int32](9), Strategy: appsv1.DeploymentStrategy{
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: ptr.To(intstr.FromString("25%"))}}}
	withServerDefaults(&want, &have)
	if *want.Replicas != 0 || want.Strategy.RollingUpdate.MaxUnavailable.String() != "0" {
		t.Errorf("replicas %d, maxUnavailable %s after the defaults; want the Broker's 0 and 0", *want.Replicas,
			want.Strategy.RollingUpdate.MaxUnavailable.String())
	}
}
