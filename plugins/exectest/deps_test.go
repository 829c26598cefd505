package exectest

import (
	"os/exec"
	"strings"
	"testing"
)

// Plugins are exec'd for every allocation, so they must stay small and
// quick to start: the cluster libraries the bridge uses have no place in
// them. This guards against an import that drags them in by accident.
func TestPluginsLinkNoClusterLibraries(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "github.com/cdiexec/cdi/plugins/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list found only %v", deps)
	}
	for _, dep := range deps {
		for _, banned := range []string{"google.golang.org/grpc", "k8s.io/client-go", "k8s.io/api"} {
			if dep == banned || strings.HasPrefix(dep, banned+"/") {
				t.Errorf("a plugin package depends on %s", dep)
			}
		}
	}
}
