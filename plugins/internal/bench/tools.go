package main

import (
	"context"
	"debug/buildinfo"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// moduleRoot finds the directory of go.mod above the working directory.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" || strings.TrimSpace(string(out)) == os.DevNull {
		return "", fmt.Errorf("run inside the module: go env GOMOD: %v", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out))), nil
}

// build compiles the plugins and the floor as `make build` does.
func build(ctx context.Context, root, dir string) error {
	pkgs := []string{"./plugins/internal/bench/testdata/floor"}
	for _, p := range pluginCases() {
		pkgs = append(pkgs, "./plugins/"+p.name)
	}
	cmd := exec.CommandContext(ctx, "go", append([]string{"build", "-trimpath", "-ldflags=-s", "-o", dir + "/"}, pkgs...)...)
	cmd.Dir, cmd.Env = root, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %w\n%s", err, out)
	}
	return nil
}

// installHostLocal installs CNI's host-local into dir from the module proxy.
func installHostLocal(ctx context.Context, dir, version string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "install", "github.com/containernetworking/plugins/plugins/ipam/host-local@"+version)
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=-mod=mod", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install host-local@%s: %w\n%s", version, err, out)
	}
	return filepath.Join(dir, "host-local"), nil
}

// linksCluster reports whether the binary's build info lists grpc or
// client-go, which plugins must never link.
func linksCluster(bin string) (bool, error) {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return false, err
	}
	for _, dep := range info.Deps {
		if dep.Path == "google.golang.org/grpc" || dep.Path == "k8s.io/client-go" {
			return true, nil
		}
	}
	return false, nil
}

func sizeMiB(path string) float64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return float64(fi.Size()) / (1 << 20)
}
