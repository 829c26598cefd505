package broker

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// TestAdversaryHugeGraceDoesNotDeleteAtOnce shows that a Broker whose
// deletionGraceSeconds is very long (10,000,000,000 s, some 317 years:
// "keep the workload, whatever happens"), which the CRD accepts (it
// has a minimum and no maximum), has the workload of a device that
// vanishes deleted at once, at the first look that finds it gone: the
// seconds times time.Second overflow int64 and the grace is negative.
// A user who asked for the longest grace gets none at all.
func TestAdversaryHugeGraceDoesNotDeleteAtOnce(t *testing.T) {
	p := testPlanner()
	lobby := camera("lobby", nil)
	br := jobBroker(1)
	br.Spec.DeletionGraceSeconds = ptr.To[int64](10_000_000_000)
	have := newOwned()
	for _, a := range p.plan(br, []Device{lobby}, newOwned()).actions {
		have.add(existing(a.obj))
	}
	// The device vanishes: the first look should only mark the Job.
	got := actionsOf(p.plan(br, nil, have))
	for _, a := range got {
		if a[:6] == "delete" {
			t.Errorf("the first look after the device vanished, grace %d s: %v; want only its gone-since marked",
				*br.Spec.DeletionGraceSeconds, got)
			break
		}
	}
	if br.Spec.grace() < time.Hour {
		t.Errorf("grace() of %d s is %v", *br.Spec.DeletionGraceSeconds, br.Spec.grace())
	}
}

// TestAdversaryDefaultedServiceIsNotRewritten shows that a Service the
// controller made, as the API server holds it (its port's targetPort and
// protocol filled in, as for every Service whose spec leaves them out,
// the Broker CRD's own example included), is updated again by every look:
// DeepDerivative ignores unset strings and pointers, not a zero
// targetPort, so the Service never matches. Every look (each pod event
// of each Deployment, every resync, every new leader) PUTs every Service
// of the Broker: "a restarted or new leader rewrites nothing" and "a
// look writes only what differs" do not hold.
func TestAdversaryDefaultedServiceIsNotRewritten(t *testing.T) {
	p := testPlanner()
	lobby := camera("lobby", nil)
	br := deploymentBroker(1)
	br.Spec.Services = &Services{PerDevice: &corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 8554}}}}
	have := newOwned()
	for _, a := range p.plan(br, []Device{lobby}, newOwned()).actions {
		obj := existing(a.obj)
		if s, ok := obj.(*corev1.Service); ok {
			// As the API server defaults and allocates it.
			s.Spec.Type, s.Spec.SessionAffinity = corev1.ServiceTypeClusterIP, corev1.ServiceAffinityNone
			s.Spec.ClusterIP, s.Spec.ClusterIPs = "10.0.0.7", []string{"10.0.0.7"}
			s.Spec.IPFamilies, s.Spec.IPFamilyPolicy = []corev1.IPFamily{corev1.IPv4Protocol}, ptr.To(corev1.IPFamilyPolicySingleStack)
			s.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyCluster)
			for i := range s.Spec.Ports {
				s.Spec.Ports[i].Protocol = corev1.ProtocolTCP
				s.Spec.Ports[i].TargetPort = intstr.FromInt32(s.Spec.Ports[i].Port)
			}
		}
		have.add(obj)
	}
	for name, d := range have.deployments {
		have.deployments[name] = defaulted(d)
	}
	if got := actionsOf(p.plan(br, []Device{lobby}, have)); len(got) != 0 {
		t.Errorf("a look at what is as the Broker wants: %v; want no write", got)
	}
}

// TestAdversaryDefaultedProbeIsNotRewritten shows the same of a
// Deployment whose pods have a readiness probe that leaves its timings
// to their defaults, as most do: the API server fills in
// timeoutSeconds 1, periodSeconds 10, successThreshold 1 and
// failureThreshold 3, and every look PUTs the Deployment back to zeros.
func TestAdversaryDefaultedProbeIsNotRewritten(t *testing.T) {
	p := testPlanner()
	lobby := camera("lobby", nil)
	br := deploymentBroker(1)
	probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8554)}}}
	br.Spec.Deployment.Template.Spec.Containers = br.Spec.Deployment.Template.Spec.Containers[:1]
	br.Spec.Deployment.Template.Spec.Containers[0].ReadinessProbe = probe
	have := newOwned()
	for _, a := range p.plan(br, []Device{lobby}, newOwned()).actions {
		have.add(existing(a.obj))
	}
	for name, d := range have.deployments {
		d = defaulted(d)
		pr := d.Spec.Template.Spec.Containers[0].ReadinessProbe
		pr.TimeoutSeconds, pr.PeriodSeconds, pr.SuccessThreshold, pr.FailureThreshold = 1, 10, 1, 3
		have.deployments[name] = d
	}
	if got := actionsOf(p.plan(br, []Device{lobby}, have)); len(got) != 0 {
		t.Errorf("a look at what is as the Broker wants: %v; want no write", got)
	}
}
