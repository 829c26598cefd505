package dra_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kwait "k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"github.com/cdiexec/cdi/bridge/dra"
)

// NodeSlices starts its controller at once and holds it back until the
// first publish: the node's slices that a bridge before it left stay
// through the controller's start, well past the sync delay after which a
// controller with no pools deletes them, and the first publish then
// replaces them.
func TestNodeSlicesWaitForTheFirstPublish(t *testing.T) {
	left := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "left-by-the-last-bridge"}, Spec: resourceapi.ResourceSliceSpec{
		Driver: "cdi.local", NodeName: ptr.To("n"), Pool: resourceapi.ResourcePool{Name: "n/tty-generic", Generation: 1, ResourceSliceCount: 1},
		Devices: []resourceapi.Device{{Name: "tty13"}},
	}}
	client := fake.NewClientset(left, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", UID: "node-uid"}})
	ctx := t.Context()
	s := dra.StartNodeSlices(ctx, "cdi.local", "n", client, func(_ context.Context, err error, msg string) { t.Logf("%s: %v", msg, err) })
	defer s.Stop()
	select {
	case <-s.Started():
	case <-time.After(time.Minute):
		t.Fatal("the controller did not start")
	}
	time.Sleep(3 * dra.SliceSyncDelay)
	if got := nodeDevices(t, client); got != "[tty13]" {
		t.Fatalf("before the first publish the node's slices hold %s, want the last bridge's tty13", got)
	}
	s.Publish(resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		"n/tty-generic": {Slices: []resourceslice.Slice{{Devices: []resourceapi.Device{{Name: "tty13"}, {Name: "tty14"}}}}},
	}})
	err := kwait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return nodeDevices(t, client) == "[tty13 tty14]", nil
	})
	if err != nil {
		t.Errorf("after the first publish the node's slices hold %s, want tty13 and tty14", nodeDevices(t, client))
	}
}

// nodeDevices is the devices of the fake API's slices, in order.
func nodeDevices(t *testing.T, client *fake.Clientset) string {
	t.Helper()
	l, err := client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range l.Items {
		for _, d := range s.Spec.Devices {
			names = append(names, d.Name)
		}
	}
	return fmt.Sprint(names)
}
