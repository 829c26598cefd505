package node

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Module paths: the main module (cdi-bridge, the plugins, the manifests)
// and this one (podcheck).
const (
	mainModule = "github.com/cdiexec/cdi"
	e2eModule  = "github.com/cdiexec/cdi/bridge/e2e"
)

// buildArtifacts builds into bin what the node runs besides the
// Makefile's programs: cdi-bridge (with the race detector, as the other
// bridge tests run it), the plugins the drop-ins name, and podcheck with
// the image around it. It returns the main module's directory.
func buildArtifacts(bin string) (string, error) {
	repo, err := moduleDir(mainModule)
	if err != nil {
		return "", err
	}
	e2e, err := moduleDir(e2eModule)
	if err != nil {
		return "", err
	}
	if err := goBuild(repo, nil, "-race", "-o", bin+"/", "./bridge/cmd/cdi-bridge"); err != nil {
		return "", err
	}
	// Static, as `make build` builds them.
	plugins := []string{"-o", bin + "/"}
	for _, d := range dropIns("", 0) {
		plugins = append(plugins, "./plugins/"+d.Plugin)
	}
	if err := goBuild(repo, []string{"CGO_ENABLED=0"}, plugins...); err != nil {
		return "", err
	}
	podcheck := filepath.Join(bin, "podcheck")
	if err := goBuild(e2e, []string{"CGO_ENABLED=0"}, "-o", podcheck, "./node/internal/podcheck"); err != nil {
		return "", err
	}
	return repo, writeImage(podcheck, filepath.Join(bin, imageTar))
}

// moduleDir is the directory of a module in this module's build list.
func moduleDir(path string) (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", path).Output()
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" {
		return "", fmt.Errorf("go list -m %s: %w (%q)", path, err, out)
	}
	return dir, nil
}

func goBuild(dir string, env []string, args ...string) error {
	cmd := exec.Command("go", append([]string{"build"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %v in %s: %w\n%s", args, dir, err, out)
	}
	return nil
}
