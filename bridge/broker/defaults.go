package broker

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The API server fills in fields a Broker's template may leave out.
// equality.Semantic.DeepDerivative, which compares what the Broker wants
// with what is, skips what the Broker leaves unset when it is a string,
// a pointer, a slice or a map, but not an integer: a made object whose
// integers the API server filled in would never match, and every look
// would write it back. So the comparison is with the wanted object as
// the API server would default it; what is written is the wanted object
// as it is. Defaults are the API's own, never the live object's values,
// which a user may have edited: only what the API server allocates (a
// nodePort) is taken from the live object. The API's own defaulting
// functions live in k8s.io/kubernetes, which is not meant to be imported
// (its module replaces every staging module); the few integers below are
// what its Service and pod defaults fill in.

// defaultedService is want as the API server would default it, beside
// have: a port's targetPort is its port; its nodePort, and the Service's
// healthCheckNodePort, as the API server allocated them for the live
// port of the same name, number and protocol.
func defaultedService(want, have *corev1.ServiceSpec) *corev1.ServiceSpec {
	out := want.DeepCopy()
	for i := range out.Ports {
		p := &out.Ports[i]
		if p.TargetPort == (intstr.IntOrString{}) {
			p.TargetPort = intstr.FromInt32(p.Port)
		}
		if p.NodePort == 0 {
			p.NodePort = nodePortOf(have.Ports, *p)
		}
	}
	if out.HealthCheckNodePort == 0 {
		out.HealthCheckNodePort = have.HealthCheckNodePort
	}
	return out
}

// nodePortOf is the nodePort of the port of ports that is p (its name,
// number and protocol), 0 for none.
func nodePortOf(ports []corev1.ServicePort, p corev1.ServicePort) int32 {
	for _, q := range ports {
		if q.Name == p.Name && q.Port == p.Port && protocolOf(q) == protocolOf(p) {
			return q.NodePort
		}
	}
	return 0
}

func protocolOf(p corev1.ServicePort) corev1.Protocol {
	if p.Protocol == "" {
		return corev1.ProtocolTCP
	}
	return p.Protocol
}

// defaultedPodTemplate is t as the API server would default its
// integers: a probe's timeout, period and thresholds; a host-network
// pod's hostPorts, its containerPorts.
func defaultedPodTemplate(t *corev1.PodTemplateSpec) *corev1.PodTemplateSpec {
	out := t.DeepCopy()
	for _, cs := range [][]corev1.Container{out.Spec.InitContainers, out.Spec.Containers} {
		for i := range cs {
			defaultContainer(&cs[i], out.Spec.HostNetwork)
		}
	}
	return out
}

func defaultContainer(c *corev1.Container, hostNetwork bool) {
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
		defaultProbe(p)
	}
	for i := range c.Ports {
		if hostNetwork && c.Ports[i].HostPort == 0 {
			c.Ports[i].HostPort = c.Ports[i].ContainerPort
		}
	}
}

// defaultProbe fills in p's timings as the API server does.
func defaultProbe(p *corev1.Probe) {
	if p == nil {
		return
	}
	for _, f := range []struct {
		field *int32
		value int32
	}{{&p.TimeoutSeconds, 1}, {&p.PeriodSeconds, 10}, {&p.SuccessThreshold, 1}, {&p.FailureThreshold, 3}} {
		if *f.field == 0 {
			*f.field = f.value
		}
	}
}
