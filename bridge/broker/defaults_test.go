package broker

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// A Service as the Broker wants it matches the live one when the API
// server only filled it in (a targetPort of the port, a nodePort it
// allocated to that port), and not when someone edited it or the Broker
// changed it.
func TestDefaultedService(t *testing.T) {
	http := corev1.ServicePort{Name: "http", Port: 80}
	tests := []struct {
		name       string
		want, have []corev1.ServicePort
		same       bool
	}{
		{name: "a targetPort and a nodePort filled in", want: []corev1.ServicePort{http},
			have: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(80), NodePort: 30080, Protocol: "TCP"}},
			same: true},
		{name: "a targetPort edited", want: []corev1.ServicePort{http},
			have: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(9999)}}},
		{name: "a targetPort the Broker no longer sets", want: []corev1.ServicePort{http},
			have: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
		{name: "a port edited", want: []corev1.ServicePort{http},
			have: []corev1.ServicePort{{Name: "http", Port: 9999, TargetPort: intstr.FromInt32(9999)}}},
		{name: "a named targetPort made a number",
			want: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("web")}},
			have: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
		{name: "a port put in front keeps each nodePort its own",
			want: []corev1.ServicePort{{Name: "web", Port: 8080}, http},
			have: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(80), NodePort: 30080}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want, have := &corev1.ServiceSpec{Ports: tc.want}, &corev1.ServiceSpec{Ports: tc.have}
			got := defaultedService(want, have)
			if same := equality.Semantic.DeepDerivative(*got, *have); same != tc.same {
				t.Errorf("the same after the defaults: %v, want %v (%+v against %+v)", same, tc.same, got.Ports, tc.have)
			}
			if want.Ports[0].TargetPort != tc.want[0].TargetPort || want.Ports[0].NodePort != 0 {
				t.Errorf("the Broker's own ports were changed: %+v", want.Ports)
			}
			for _, p := range got.Ports {
				if p.Name == "web" && p.NodePort != 0 {
					t.Errorf("the new port web took nodePort %d of another", p.NodePort)
				}
			}
		})
	}
}

// A probe's timings and a host-network pod's hostPorts are defaulted as
// the API server does it; a hostPort the Broker left out of a pod on the
// pod network stays 0, so that a live one of another value is seen.
func TestDefaultedPodTemplate(t *testing.T) {
	probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(554)}}}
	tpl := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", ReadinessProbe: probe,
		Ports: []corev1.ContainerPort{{ContainerPort: 554}}}}}}
	got := defaultedPodTemplate(tpl)
	p := got.Spec.Containers[0].ReadinessProbe
	if p.TimeoutSeconds != 1 || p.PeriodSeconds != 10 || p.SuccessThreshold != 1 || p.FailureThreshold != 3 || p.InitialDelaySeconds != 0 {
		t.Errorf("the probe defaulted: %+v", p)
	}
	if got.Spec.Containers[0].Ports[0].HostPort != 0 {
		t.Errorf("a pod-network pod's hostPort defaulted to %d, want 0", got.Spec.Containers[0].Ports[0].HostPort)
	}
	if probe.PeriodSeconds != 0 {
		t.Errorf("the Broker's own template was changed")
	}
	tpl.Spec.HostNetwork = true
	if hp := defaultedPodTemplate(tpl).Spec.Containers[0].Ports[0].HostPort; hp != 554 {
		t.Errorf("a host-network pod's hostPort defaulted to %d, want its containerPort 554", hp)
	}
}
