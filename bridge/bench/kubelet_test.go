package bench

import (
	"context"
	"fmt"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cdiexec/cdi/bridge/internal/testing/kubelettest"
)

// kubelet is the kubelet's device-manager side over real unix sockets
// (kubelettest), read through every list each stream delivered and the
// time it arrived: propagation and start-up are measured from those
// times, and counting the lists tells a new one from an old one with the
// same content.
type kubelet struct{ *kubelettest.Kubelet }

// list is one ListAndWatch response and when it arrived.
type list = kubelettest.List

// startKubelet serves kubelet.sock in dir.
func startKubelet(dir string) (*kubelet, error) {
	k, err := kubelettest.Start(dir)
	if err != nil {
		return nil, fmt.Errorf("kubelet socket: %w", err)
	}
	return &kubelet{k}, nil
}

// counts returns how many lists each stream has delivered so far.
func (k *kubelet) counts() map[string]int {
	out := map[string]int{}
	for res, h := range k.History() {
		out[res] = len(h)
	}
	return out
}

// quiet waits until no list has arrived on any stream for d, or
// timeout passes.
func (k *kubelet) quiet(d, timeout time.Duration) error {
	total := func() int {
		n := 0
		for _, c := range k.counts() {
			n += c
		}
		return n
	}
	deadline := time.Now().Add(timeout)
	for last := total(); time.Now().Before(deadline); {
		time.Sleep(d)
		now := total()
		if now == last {
			return nil
		}
		last = now
	}
	return fmt.Errorf("lists kept arriving for %v", timeout)
}

// waitList waits for the first list of resource, from index from on,
// that ok accepts, and returns it. A stream sends only lists that differ
// from its last, so when the list it sent last, before from, already
// fits, nothing new will come: that one is returned with a zero time,
// meaning no update was needed.
func (k *kubelet) waitList(resource string, from int, timeout time.Duration, ok func([]*pluginapi.Device) bool) (list, error) {
	var found list
	err := k.Await(timeout, func(history map[string][]list) bool {
		h := history[resource]
		if len(h) == 0 {
			return false
		}
		for _, l := range h[min(from, len(h)):] {
			if ok(l.Devices) {
				found = l
				return true
			}
		}
		if last := h[len(h)-1]; len(h) <= from && ok(last.Devices) {
			found = list{Devices: last.Devices}
			return true
		}
		return false
	})
	if err != nil {
		return list{}, fmt.Errorf("a list of %s from #%d on that fits: %w", resource, from, err)
	}
	return found, nil
}

// waitStreams waits until n streams have sent their first list.
func (k *kubelet) waitStreams(n int, timeout time.Duration) error {
	got := 0
	err := k.Await(timeout, func(history map[string][]list) bool {
		got = 0
		for _, h := range history {
			if len(h) > 0 {
				got++
			}
		}
		return got >= n
	})
	if err != nil {
		return fmt.Errorf("%d streams with a first list (have %d): %w", n, got, err)
	}
	return nil
}

// allocate calls resource's Allocate for one container with ids.
func (k *kubelet) allocate(ctx context.Context, resource string, ids []string) (*pluginapi.AllocateResponse, error) {
	resp, err := k.Allocate(ctx, resource, ids)
	if err != nil {
		return nil, fmt.Errorf("allocating %s %v: %w", resource, ids, err)
	}
	return resp, nil
}

// stop closes the server and every plugin connection.
func (k *kubelet) stop() { k.Stop() }
