package broker

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Adversarial tests, second round: the planner's side of
// withServerDefaults, which fills the zero integers of what the Broker
// wants from the object as it is before comparing, and then writes what
// it filled.

// servedService is the Service the plan makes for the Broker's device,
// as the API server holds it: its ports' protocol and targetPort filled
// in, and a nodePort allocated to each port of a NodePort Service.
func servedService(t *testing.T, p planner, br *Broker, devices []Device) owned {
	t.Helper()
	have := newOwned()
	for i, a := range p.plan(br, devices, newOwned()).actions {
		obj := existing(a.obj)
		switch o := obj.(type) {
		case *corev1.Service:
			o.Spec.ClusterIP, o.Spec.ClusterIPs = "10.0.0.7", []string{"10.0.0.7"}
			for j := range o.Spec.Ports {
				port := &o.Spec.Ports[j]
				port.Protocol = corev1.ProtocolTCP
				if port.TargetPort.IntValue() == 0 && port.TargetPort.Type == intstr.Int {
					port.TargetPort = intstr.FromInt32(port.Port)
				}
				if o.Spec.Type == corev1.ServiceTypeNodePort && port.NodePort == 0 {
					port.NodePort = int32(30000 + 100*i + j)
				}
			}
		case *appsv1.Deployment:
			obj = defaulted(o)
		}
		have.add(obj)
	}
	return have
}

// serviceUpdate is the Service the plan's update writes, nil for none.
func serviceUpdate(pl plan) *corev1.Service {
	for _, a := range pl.actions {
		if s, ok := a.obj.(*corev1.Service); ok && a.op == update {
			return s
		}
	}
	return nil
}

// TestAdversary2RemovedTargetPortIsApplied shows that a Broker whose
// Service's targetPort is taken out of its spec (port 80 to 8080
// becomes port 80 to the pods' 80, as the image now listens there)
// has its Service updated (its hash changed) to the old targetPort:
// withServerDefaults fills the Broker's zero targetPort from the
// Service as it is, and the update writes that. The Service keeps
// sending port 80 to 8080, where nothing listens any more, for ever:
// the Broker's change is never applied, and every later look finds the
// Service as it "wants" it.
func TestAdversary2RemovedTargetPortIsApplied(t *testing.T) {
	p := testPlanner()
	lobby := camera("lobby", nil)
	br := deploymentBroker(1)
	br.Spec.Services = &Services{PerDevice: &corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
	have := servedService(t, p, br, []Device{lobby})
	br.Spec.Services.PerDevice.Ports[0].TargetPort = intstr.IntOrString{}
	next := serviceUpdate(p.plan(br, []Device{lobby}, have))
	if next == nil {
		t.Fatalf("the Broker's Service spec changed and no update of the Service is planned")
	}
	if tp := next.Spec.Ports[0].TargetPort; tp.String() == "8080" {
		t.Errorf("the Broker took targetPort 8080 out of its Service (so: port 80 to the pods' 80); "+
			"the Service is updated to targetPort %s, the old one", tp.String())
	}
}

// TestAdversary2PortAddedInFrontKeepsEachPortItsOwn shows that a port
// added at the front of a Broker's NodePort Service (an "http" port
// before the "rtsp" one) is given, by withServerDefaults, which pairs
// the ports by their index and not by name or port, the rtsp port's
// targetPort and nodePort: the update sends http's port 80 to the
// pods' RTSP server on 554 and takes over the rtsp port's nodePort, which the
// clients outside the cluster use for RTSP; rtsp gets a new nodePort.
func TestAdversary2PortAddedInFrontKeepsEachPortItsOwn(t *testing.T) {
	p := testPlanner()
	lobby := camera("lobby", nil)
	br := deploymentBroker(1)
	rtsp := corev1.ServicePort{Name: "rtsp", Port: 8554, TargetPort: intstr.FromInt32(554)}
	br.Spec.Services = &Services{PerDevice: &corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{rtsp}}}
	have := servedService(t, p, br, []Device{lobby})
	var before corev1.ServicePort
	for _, s := range have.services {
		before = s.Spec.Ports[0]
	}
	br.Spec.Services.PerDevice.Ports = []corev1.ServicePort{{Name: "http", Port: 80}, rtsp}
	next := serviceUpdate(p.plan(br, []Device{lobby}, have))
	if next == nil {
		t.Fatalf("a port added and no update of the Service is planned")
	}
	for _, port := range next.Spec.Ports {
		t.Logf("updated to: %s port %d targetPort %s nodePort %d", port.Name, port.Port, port.TargetPort.String(), port.NodePort)
	}
	http, kept := next.Spec.Ports[0], next.Spec.Ports[1]
	if http.TargetPort.String() == "554" {
		t.Errorf("the new http port 80 is sent to targetPort 554, the rtsp port's")
	}
	if http.NodePort == before.NodePort || kept.NodePort != before.NodePort && kept.NodePort != 0 {
		t.Errorf("nodePort %d, which rtsp had, given to http (%d); rtsp's %d", before.NodePort, http.NodePort, kept.NodePort)
	}
}

// TestAdversary2RemovedHostPortAndDelayAreApplied shows the same of a
// Deployment: the Broker takes its container's hostPort (8554, which
// lets only one pod per node run) and its readiness probe's
// initialDelaySeconds (120) out of its template; the Deployment's update
// (its hash changed) writes both back, as the Deployment has them:
// zero, which the Broker now says, is taken for "unset" and filled from
// the live Deployment. The pods keep their hostPort and their two
// minutes' delay, whatever the Broker says.
func TestAdversary2RemovedHostPortAndDelayAreApplied(t *testing.T) {
	p := testPlanner()
	lobby := camera("lobby", nil)
	br := deploymentBroker(1)
	c := &br.Spec.Deployment.Template.Spec.Containers[0]
	c.Ports = []corev1.ContainerPort{{Name: "rtsp", ContainerPort: 8554, HostPort: 8554}}
	c.ReadinessProbe = &corev1.Probe{InitialDelaySeconds: 120,
		ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8554)}}}
	have := servedService(t, p, br, []Device{lobby})
	c.Ports[0].HostPort, c.ReadinessProbe.InitialDelaySeconds = 0, 0
	var next *appsv1.Deployment
	for _, a := range p.plan(br, []Device{lobby}, have).actions {
		if d, ok := a.obj.(*appsv1.Deployment); ok && a.op == update {
			next = d
		}
	}
	if next == nil {
		t.Fatalf("the Broker's template changed and no update of the Deployment is planned")
	}
	got := next.Spec.Template.Spec.Containers[0]
	if got.Ports[0].HostPort != 0 || got.ReadinessProbe.InitialDelaySeconds != 0 {
		t.Errorf("the Broker took hostPort and initialDelaySeconds out; the Deployment is updated to hostPort %d, initialDelaySeconds %d",
			got.Ports[0].HostPort, got.ReadinessProbe.InitialDelaySeconds)
	}
}

// TestAdversary2EditedTargetPortIsPutBack shows that an edit of a
// Service's targetPort (kubectl edit: 8554 to 9999) is not put back
// when the Broker's spec leaves targetPort to its default, the port, as
// most Services and the CRD's example do: withServerDefaults takes the
// edited 9999 for the API server's default, and the look finds the
// Service as the Broker wants it. The Service sends its traffic where
// nothing listens; "a Service edited away from what the Broker wants is
// put back" does not hold for the field that matters most.
func TestAdversary2EditedTargetPortIsPutBack(t *testing.T) {
	p := testPlanner()
	lobby := camera("lobby", nil)
	br := deploymentBroker(1)
	br.Spec.Services = &Services{PerDevice: &corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 8554}}}}
	have := servedService(t, p, br, []Device{lobby})
	if got := actionsOf(p.plan(br, []Device{lobby}, have)); len(got) != 0 {
		t.Fatalf("a look at what is as the Broker wants: %v", got)
	}
	for _, s := range have.services {
		s.Spec.Ports[0].TargetPort = intstr.FromInt32(9999)
	}
	next := serviceUpdate(p.plan(br, []Device{lobby}, have))
	if next == nil {
		t.Fatalf("the Service's targetPort edited to 9999 (the Broker's: its port, 8554) is not put back")
	}
	if tp := next.Spec.Ports[0].TargetPort.String(); tp == "9999" {
		t.Errorf("the Service is updated with the edited targetPort %s", tp)
	}
}
