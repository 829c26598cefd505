package drafront

import (
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/cdiexec/cdi/bridge/dra"
	"github.com/cdiexec/cdi/bridge/dradevices"
)

// With a pod UID, Start judges the checkpoint under the library's lock of
// the calls. The other bridge of a rolling update holds it while it
// writes the file: one that could not be read when Start came, and that
// the other bridge's call replaced meanwhile, is read as it is then,
// never moved aside for what it was before.
func TestStartOpensTheCheckpointUnderTheLockOfTheCalls(t *testing.T) {
	r := newRig(t)
	writeFile(t, r.checkpoint, `{"version":1,"claims":{"a":{"namesp`)
	unlock, err := dra.LockCalls(t.Context(), r.pluginDir)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	var mu sync.Mutex
	var setAside []string
	client := fake.NewClientset()
	cfg := r.config(t, client)
	cfg.PodUID = types.UID("pod-2")
	cfg.OnSetAside = func(reason string) {
		mu.Lock()
		defer mu.Unlock()
		setAside = append(setAside, reason)
	}
	started := make(chan *FrontEnd, 1)
	go func() {
		f, err := Start(t.Context(), cfg)
		if err != nil {
			t.Error(err)
		}
		started <- f
	}()
	select {
	case <-started:
		t.Fatal("Start returned while the other bridge's call held the lock")
	case <-time.After(300 * time.Millisecond):
	}
	// The other bridge's call writes the checkpoint, then lets go.
	writeFile(t, r.checkpoint, `{"version":1,"claims":{"a":{"namespace":"ns","name":"a","devices":[]}}}`)
	unlock()
	f := <-started
	if f == nil {
		return
	}
	if got := f.preparer.Checkpoint.UIDs(); !slices.Equal(got, []types.UID{"a"}) {
		t.Errorf("the checkpoint records %v, want the other bridge's a", got)
	}
	mu.Lock()
	told := slices.Clone(setAside)
	mu.Unlock()
	if aside, _ := filepath.Glob(r.checkpoint + ".*"); len(aside) != 0 || len(told) != 0 {
		t.Fatalf("set aside: %v, told %v; want none", aside, told)
	}

	// Cut short later, the checkpoint is set aside by the next call that
	// reads it anew, which the operator is told of as at start.
	f.SetPools(r.discover(t))
	writeFile(t, r.checkpoint, `{"version":1,"claims":{"a":{"namesp`)
	if err := f.preparer.Unprepare(t.Context(), "a"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the metric and the Warning Event of the checkpoint set aside", func() bool {
		mu.Lock()
		defer mu.Unlock()
		evs, err := client.EventsV1().Events(metav1.NamespaceDefault).List(t.Context(), metav1.ListOptions{})
		return err == nil && slices.Equal(setAside, []string{dradevices.ReasonUnreadable}) && len(evs.Items) == 1 &&
			evs.Items[0].Reason == "DRACheckpointSetAside" && evs.Items[0].Action == "Rewrite"
	})
}
