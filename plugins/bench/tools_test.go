package bench

import (
	"context"
	"debug/buildinfo"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"github.com/cdiexec/cdi/internal/gobuild"
)

// pluginCase is a benchmarked plugin: its default drop-in and a request.
type pluginCase struct{ name, conf, request string }

func pluginCases() []pluginCase {
	return []pluginCase{
		{"generic-tty", "conf.d/tty.d/generic.conf", "tty:1"},
		{"drm", "conf.d/gpu.d/drm.conf", "gpu:1"},
		{"generic", "conf.d/dev.d/generic.conf", "dev-serial:1"},
		{"endpoint", "conf.d/camera.d/endpoint.conf", "camera:1"},
	}
}

// build compiles the plugins as `make build` compiles them
// (internal/gobuild), and the floors the same way, so that they stay the
// least a plugin built that way can cost.
func build(ctx context.Context, root, dir string) error {
	pkgs := []string{"./plugins/bench/testdata/floor", "./plugins/bench/testdata/statefloor", "./plugins/bench/testdata/pagefloor"}
	for _, p := range pluginCases() {
		pkgs = append(pkgs, "./plugins/"+p.name)
	}
	cmd := gobuild.Command(ctx, root, dir+"/", pkgs...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %w\n%s", err, out)
	}
	for _, p := range pkgs {
		if err := installCopy(filepath.Join(dir, path.Base(p))); err != nil {
			return err
		}
	}
	return nil
}

// installCopy replaces the binary at bin with a copy of itself, which is
// how a runtime finds a plugin: `make install` and cdi-install copy
// binaries into place, and so does `go install`, which placed host-local.
// The file the linker wrote is not equivalent: timed side by side on the
// VM this bench was written on (interleaved execs outside the bench), an
// exec of it was slower than an exec of a copy, the more so the bigger
// the binary. Timing the linker's files would handicap the floor and the
// plugins against host-local, and the plugins against the floor.
func installCopy(bin string) error {
	src, err := os.Open(bin)
	if err != nil {
		return fmt.Errorf("installing %s: %w", bin, err)
	}
	defer src.Close()
	tmp := bin + ".copy"
	dst, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return fmt.Errorf("installing %s: %w", bin, err)
	}
	_, err = io.Copy(dst, src)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, bin)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("installing %s: %w", bin, err)
	}
	return nil
}

// cniPluginsModule holds host-local, CNI's reference IPAM plugin.
const cniPluginsModule = "github.com/containernetworking/plugins"

// latestVersion asks the module proxy for the newest version of module.
// It runs outside this module so that go.mod neither pins nor gains it.
func latestVersion(ctx context.Context, module string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-versions", module)
	cmd.Dir = os.TempDir()
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list -m -versions %s: %w", module, err)
	}
	f := strings.Fields(string(out))
	if len(f) < 2 {
		return "", fmt.Errorf("the module proxy lists no version of %s", module)
	}
	return f[len(f)-1], nil
}

// installHostLocal installs CNI's host-local into dir from the module
// proxy; -mod=mod because the package's module is not in any go.mod here.
func installHostLocal(ctx context.Context, dir, version string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "install", cniPluginsModule+"/plugins/ipam/host-local@"+version)
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=-mod=mod", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install host-local@%s: %w\n%s", version, err, out)
	}
	bin := filepath.Join(dir, "host-local")
	return bin, installCopy(bin) // as the plugins, whatever go install did
}

// clusterLibraries returns the cluster libraries the binary's build info
// lists (grpc, client-go), which plugins must never link: they would make
// every exec bigger and slower to start.
func clusterLibraries(bin string) ([]string, error) {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return nil, fmt.Errorf("build info of %s: %w", bin, err)
	}
	var found []string
	for _, dep := range info.Deps {
		if dep.Path == "google.golang.org/grpc" || dep.Path == "k8s.io/client-go" {
			found = append(found, dep.Path)
		}
	}
	return found, nil
}

func sizeMiB(path string) float64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return float64(fi.Size()) / (1 << 20)
}
