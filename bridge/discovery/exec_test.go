package discovery

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/invoke"
)

// OnExec hears of every run of a pool's plugin: discovery's INFO, and
// the ADD of a later call on the plugin the pool hands out.
func TestOnExecTimesEveryRun(t *testing.T) {
	d, _ := newDiscoverer(t)
	var mu sync.Mutex
	runs := map[string]int{}
	d.OnExec = func(plugin, command, result string, took time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		if took <= 0 {
			t.Errorf("%s %s took %v", plugin, command, took)
		}
		runs[plugin+" "+command+" "+result]++
	}
	pools, err := d.Discover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var tty Pool
	for _, p := range pools {
		if p.Name == "tty-generic" {
			tty = p
		}
	}
	req, _ := spec.ParseRequest("tty:1")
	if _, err := tty.Plugin.Add(context.Background(), invoke.AddRequest{Request: req, RequestID: "r1", Devices: []string{tty.Devices[0].ID}}); err != nil {
		t.Fatal(err)
	}
	// An ADD the plugin refuses (a device it does not have) is an error.
	if _, err := tty.Plugin.Add(context.Background(), invoke.AddRequest{Request: req, RequestID: "r2", Devices: []string{"tty0"}}); err == nil {
		t.Fatal("ADD of a device the pool does not have succeeded")
	}
	mu.Lock()
	defer mu.Unlock()
	for _, want := range []string{"generic-tty INFO ok", "generic INFO ok", "generic-tty ADD ok", "generic-tty ADD error"} {
		if runs[want] == 0 {
			t.Errorf("no %q run observed; observed %v", want, runs)
		}
	}
}

func TestCommand(t *testing.T) {
	tests := []struct {
		env  []string
		want string
	}{
		{[]string{"CDI_VERSION=0.1.0", "CDI_COMMAND=add"}, "ADD"},
		{[]string{"CDI_COMMAND=INFO"}, "INFO"},
		{[]string{"CDI_VERSION=0.1.0"}, ""},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.env, " "), func(t *testing.T) {
			if got := command(tt.env); got != tt.want {
				t.Errorf("command(%v) = %q, want %q", tt.env, got, tt.want)
			}
		})
	}
}
