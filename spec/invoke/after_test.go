package invoke_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cdiexec/cdi/spec/invoke"
)

// markingPlugin is the test plugin leaving a file in dir, named by the
// request-id, for every ADD it runs.
func markingPlugin(dir string) *invoke.Plugin {
	p := newPlugin("")
	p.Config = []byte(fmt.Sprintf(`{"cdiVersion":"0.1.0","name":"test","type":"tty","plugin":"testplugin","args":{"markDir":%q}}`, dir))
	return p
}

// AddAfter starts the plugin at once but holds its input back: nothing is
// allocated before ready says go, and an error from ready stops the
// plugin without it allocating anything.
func TestAddAfter(t *testing.T) {
	t.Parallel()
	stop := errors.New("the claim failed")
	for _, tc := range []struct {
		name  string
		ready error
	}{{"go", nil}, {"stop", stop}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := markingPlugin(dir)
			ready := make(chan error, 1)
			type result struct{ err error }
			done := make(chan result, 1)
			go func() {
				_, err := p.AddAfter(context.Background(), invoke.AddRequest{Request: mustRequest(t, "tty:1"), RequestID: "r1"}, ready)
				done <- result{err}
			}()
			// Long enough for an ungated plugin to have run its ADD.
			time.Sleep(300 * time.Millisecond)
			if _, err := os.Stat(filepath.Join(dir, "r1")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the plugin ran its ADD before ready (%v)", err)
			}
			ready <- tc.ready
			r := <-done
			_, statErr := os.Stat(filepath.Join(dir, "r1"))
			switch {
			case tc.ready == nil && (r.err != nil || statErr != nil):
				t.Fatalf("after ready: %v; its ADD's mark: %v", r.err, statErr)
			case tc.ready != nil && (!errors.Is(r.err, invoke.ErrNotRun) || !errors.Is(r.err, stop)):
				t.Fatalf("AddAfter = %v, want ErrNotRun wrapping the ready error", r.err)
			case tc.ready != nil && statErr == nil:
				t.Fatal("the plugin ran its ADD although ready said stop")
			}
		})
	}
}
