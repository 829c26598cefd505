package node

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/cdiexec/cdi/internal/gobuild"
)

// Module paths: the main module (cdi-bridge, the plugins, the manifests)
// and this one (podcheck).
const (
	mainModule = "github.com/cdiexec/cdi"
	e2eModule  = "github.com/cdiexec/cdi/bridge/e2e"
)

// buildArtifacts builds into bin what the node runs besides the
// Makefile's programs: cdi-bridge (with the race detector, as the other
// bridge tests run it), the plugins the drop-ins name, podcheck with the
// image around it, and the bridge's own image. It returns the main
// module's directory and the bridge image's names.
func buildArtifacts(bin string) (repo string, bridgeImage []string, err error) {
	if repo, err = moduleDir(mainModule); err != nil {
		return "", nil, err
	}
	e2e, err := moduleDir(e2eModule)
	if err != nil {
		return "", nil, err
	}
	if bridgeImage, err = buildBridgeImage(repo, filepath.Join(bin, bridgeImageTar)); err != nil {
		return "", nil, err
	}
	if err := goBuild(repo, nil, "-race", "-o", bin+"/", "./bridge/cmd/cdi-bridge"); err != nil {
		return "", nil, err
	}
	if err := buildPlugins(repo, bin); err != nil {
		return "", nil, err
	}
	podcheck := filepath.Join(bin, "podcheck")
	if err := goBuild(e2e, []string{"CGO_ENABLED=0"}, "-o", podcheck, "./node/internal/podcheck"); err != nil {
		return "", nil, err
	}
	return repo, bridgeImage, writeImage(podcheck, filepath.Join(bin, imageTar))
}

// buildPlugins builds into bin the plugins the drop-ins name, as `make
// build` builds them (internal/gobuild).
func buildPlugins(repo, bin string) error {
	var plugins []string
	for _, d := range dropIns("", 0) {
		plugins = append(plugins, "./plugins/"+d.Plugin)
	}
	cmd := gobuild.Command(context.Background(), repo, bin+"/", plugins...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %v in %s: %w\n%s", plugins, repo, err, out)
	}
	return nil
}

// bridgeImageTar is the bridge's image, as `make image` builds it.
const bridgeImageTar = "cdi-bridge-image.tar"

// buildBridgeImage builds the bridge's image for this machine's
// architecture, as `make image ARCHES=<arch>` does, into out, and returns
// its names: the manifests' cdi-bridge:dev, then the same repository
// tagged with the build's version.
func buildBridgeImage(repo, out string) ([]string, error) {
	cmd := exec.Command("go", "run", "./bridge/deploy/image", "-o", out, "-tag", bridgeImageName, "-arch", runtime.GOARCH)
	cmd.Dir = repo
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("building the bridge's image: %w\n%s", err, stderr.String())
	}
	// It prints the tarball, the index digest, then the names, as
	// containerd has them: docker.io/library/cdi-bridge:dev.
	fields := strings.Fields(string(stdout))
	if len(fields) != 4 || !strings.HasSuffix(fields[2], "/"+bridgeImageName) {
		return nil, fmt.Errorf("building the bridge's image: want %s and a version tag, got %q", bridgeImageName, stdout)
	}
	return fields[2:], nil
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
