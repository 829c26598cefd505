package kubelet

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/klog/v2"

	"github.com/cdiexec/cdi/internal/gobuild"
)

// build is what TestMain prepares once for every test.
var build struct {
	// root is the main module's directory: conf.d and testdata/root.
	root string
	// bin holds cdi-bridge and the plugins the drop-ins name.
	bin string
	// addressFlag is the flag that moves the bridge's HTTP endpoints.
	addressFlag string
	// klog receives the device manager's log, which is global: a failing
	// test prints its own part (see startKubelet).
	klog *os.File
}

func TestMain(m *testing.M) {
	code, err := prepare(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 2
	}
	os.Exit(code)
}

func prepare(m *testing.M) (int, error) {
	kube, err := moduleDir("k8s.io/kubernetes")
	if err != nil {
		return 0, err
	}
	if err := checkLinkedSignature(kube); err != nil {
		return 0, err
	}
	if build.root, err = moduleDir("github.com/cdiexec/cdi"); err != nil {
		return 0, err
	}
	if build.bin, err = os.MkdirTemp("", "cdi-e2e-bin"); err != nil {
		return 0, err
	}
	defer os.RemoveAll(build.bin)
	if build.klog, err = redirectKlog(build.bin); err != nil {
		return 0, err
	}
	if err := buildBinaries(); err != nil {
		return 0, err
	}
	if build.addressFlag, err = addressFlag(); err != nil {
		return 0, err
	}
	return m.Run(), nil
}

// redirectKlog sends klog's output, every severity once, to a file in
// dir instead of stderr.
func redirectKlog(dir string) (*os.File, error) {
	f, err := os.Create(filepath.Join(dir, "kubelet.log"))
	if err != nil {
		return nil, err
	}
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	for name, value := range map[string]string{"logtostderr": "false", "stderrthreshold": "FATAL", "one_output": "true"} {
		if err := fs.Set(name, value); err != nil {
			return nil, fmt.Errorf("klog flag %s: %w", name, err)
		}
	}
	klog.SetOutput(f)
	return f, nil
}

// moduleDir is the directory of a module in this module's build list:
// the main module through its replace, k8s.io/kubernetes in the cache.
func moduleDir(path string) (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", path).Output()
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" {
		return "", fmt.Errorf("go list -m %s: %w (%q)", path, err, out)
	}
	return dir, nil
}

// checkLinkedSignature fails when newManagerImpl's declaration is not the
// one newManagerImpl links to.
func checkLinkedSignature(kube string) error {
	src, err := os.ReadFile(filepath.Join(kube, "pkg", "kubelet", "cm", "devicemanager", "manager.go"))
	if err != nil {
		return err
	}
	if !bytes.Contains(src, []byte(newManagerSignature)) {
		return errors.New("devicemanager.newManagerImpl changed its signature: update the go:linkname declaration and newManagerSignature")
	}
	return nil
}

// buildBinaries builds, in the main module, cdi-bridge (with the race
// detector) and every plugin a drop-in names, as `make build` builds them
// (internal/gobuild).
func buildBinaries() error {
	if err := goBuild("-race", "./bridge/cmd/cdi-bridge"); err != nil {
		return err
	}
	drops, err := filepath.Glob(filepath.Join(build.root, "conf.d", "*", "*.conf"))
	if err != nil {
		return err
	}
	args := []string{}
	seen := map[string]bool{}
	for _, path := range drops {
		var doc struct{ Plugin string }
		if err := readJSON(path, &doc); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if !seen[doc.Plugin] {
			seen[doc.Plugin] = true
			args = append(args, "./plugins/"+doc.Plugin)
		}
	}
	if len(args) == 0 {
		return fmt.Errorf("no drop-ins under %s/conf.d", build.root)
	}
	cmd := gobuild.Command(context.Background(), build.root, build.bin+"/", args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %v: %w\n%s", args, err, out)
	}
	return nil
}

func goBuild(args ...string) error {
	cmd := exec.Command("go", append([]string{"build", "-o", build.bin + "/"}, args...)...)
	cmd.Dir = build.root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %v: %w\n%s", args, err, out)
	}
	return nil
}

// addressFlag finds the flag that sets the bridge's HTTP address.
func addressFlag() (string, error) {
	out, _ := exec.Command(filepath.Join(build.bin, "cdi-bridge"), "--help").CombinedOutput()
	for _, name := range []string{"metrics-address", "health-address"} {
		if bytes.Contains(out, []byte("-"+name+" ")) {
			return "--" + name, nil
		}
	}
	return "", fmt.Errorf("cdi-bridge --help names no HTTP address flag:\n%s", out)
}
