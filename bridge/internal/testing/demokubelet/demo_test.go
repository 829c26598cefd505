package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDemo runs the README's demo, testdata/demo.sh, as a user would: it
// must succeed and show both of the bridge's allocations, and the CDI
// spec file that resolves the GPU's name to its device nodes.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping with -short: make demo builds every binary anew")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("the demo installs with make, which is not on the PATH")
	}
	cmd := exec.Command("bash", "testdata/demo.sh")
	cmd.Dir = "../../../.."
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("demo.sh: %v\n%s", err, out)
	}
	for _, want := range []string{"Instance-level: cdi.local/gpu-drm-", "Configuration-level: cdi.local/tty-generic",
		"cdi device  cdi.local/gpu-drm=", `"kind":"cdi.local/gpu-drm"`, `"hostPath":"/dev/dri/card`,
		"annotation  cdi.local/slot-tty-generic-", "released 2 allocation(s)"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the demo's output lacks %q:\n%s", want, out)
		}
	}
}
