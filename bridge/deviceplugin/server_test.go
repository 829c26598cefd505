package deviceplugin

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// recordingStream is the server side of one ListAndWatch stream, keeping
// what is sent.
type recordingStream struct {
	grpc.ServerStream
	ctx  context.Context
	mu   sync.Mutex
	sent []string
}

func (s *recordingStream) Context() context.Context { return s.ctx }

func (s *recordingStream) Send(r *pluginapi.ListAndWatchResponse) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = append(s.sent, ids(r.Devices))
	return nil
}

func (s *recordingStream) lists() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.sent...)
}

// countingHandler counts the list reads, one per wake-up of the stream.
type countingHandler struct {
	fakeHandler
	reads chan struct{}
}

func (h *countingHandler) Devices() []Device {
	defer func() { h.reads <- struct{}{} }()
	return h.fakeHandler.Devices()
}

// A change signal that leaves the list as it was sends nothing; the next
// real change is sent.
func TestListAndWatchSendsOnlyChanges(t *testing.T) {
	h := &countingHandler{reads: make(chan struct{}, 10)}
	h.set(Device{ID: "a", Healthy: true})
	ctx, cancel := context.WithCancel(context.Background())
	stream := &recordingStream{ctx: ctx}
	s := &server{handler: h, done: make(chan struct{})}
	done := make(chan error, 1)
	go func() { done <- s.ListAndWatch(&pluginapi.Empty{}, stream) }()
	read := func() {
		t.Helper()
		select {
		case <-h.reads:
		case <-time.After(wait):
			t.Fatal("the stream did not read the list")
		}
	}
	read()
	h.set(Device{ID: "a", Healthy: true}) // the same list, signalled again
	read()
	h.set(Device{ID: "a", Healthy: false})
	read()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := stream.lists(); len(got) != 2 || got[0] != "a=Healthy" || got[1] != "a=Unhealthy" {
		t.Errorf("sent %q, want the first list and the change only", got)
	}
}

// Spec.Sent is told of every list that went out, the empty one of a
// withdrawal included, and of no signal that sent nothing: it is the
// moment the kubelet has the list.
func TestListAndWatchTellsSent(t *testing.T) {
	h := &countingHandler{reads: make(chan struct{}, 10)}
	h.set(Device{ID: "a", Healthy: true})
	var mu sync.Mutex
	told := 0
	s := newServer(Spec{Handler: h, Sent: func() { mu.Lock(); told++; mu.Unlock() }})
	stream := &recordingStream{ctx: context.Background()}
	done := make(chan error, 1)
	go func() { done <- s.ListAndWatch(&pluginapi.Empty{}, stream) }()
	for _, healthy := range []bool{true, true, false} {
		select {
		case <-h.reads:
		case <-time.After(wait):
			t.Fatal("the stream did not read the list")
		}
		h.set(Device{ID: "a", Healthy: healthy})
	}
	<-h.reads
	s.withdraw = true
	close(s.done)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if sent := len(stream.lists()); told != sent || sent != 3 {
		t.Errorf("Sent told %d times for %d lists (%q), want 3 and 3", told, sent, stream.lists())
	}
}
