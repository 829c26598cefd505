package node

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"text/template"
	"time"
)

const (
	// containerdSocket is the CRI endpoint: containerd 2 puts its shims'
	// sockets under /run/containerd whatever its state directory, so the
	// node's /run is private anyway (privateDirs).
	containerdSocket = "/run/containerd/containerd.sock"
	// cdiSpecDir is where containerd reads CDI spec files and cdi-bridge
	// writes them (its --cdi-spec-dir default).
	cdiSpecDir = "/var/run/cdi"
	// criNamespace is the containerd namespace the CRI plugin uses.
	criNamespace = "k8s.io"
	// containerdReady bounds containerd's start.
	containerdReady = time.Minute
)

// containerdConfig is containerd 2's configuration (version 3). Every
// directory it would use by default on the host (/var/lib/containerd,
// /opt/containerd, /etc/cni/net.d, /opt/cni/bin) is replaced by one under
// the test's, and NRI is off (it would listen under /var/run/nri and look
// for plugins in /opt/nri). restrict_oom_score_adj: this machine's
// bounding set lacks CAP_SYS_RESOURCE, so runc cannot lower a container's
// oom_score_adj below containerd's own.
var containerdConfig = template.Must(template.New("config.toml").Parse(`version = 3
root = '{{.Dir}}/root'
state = '{{.Dir}}/state'

[grpc]
  address = '{{.Socket}}'

[plugins.'io.containerd.internal.v1.opt']
  path = '{{.Dir}}/opt'

[plugins.'io.containerd.nri.v1.nri']
  disable = true

[plugins.'io.containerd.image-verifier.v1.bindir']
  bin_dir = '{{.Dir}}/image-verifier'

[plugins.'io.containerd.cri.v1.images']
  snapshotter = '{{.Snapshotter}}'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = '{{.SandboxImage}}'

[plugins.'io.containerd.cri.v1.runtime']
  enable_cdi = true
  cdi_spec_dirs = ['{{.CDISpecDir}}']
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = 'runc'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = '{{.Runc}}'
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['{{.CNIBinDir}}']
    conf_dir = '{{.Dir}}/cni'
`))

// cniConfig makes the runtime report its network ready. Host-network
// pods never call CNI; were one to, it would get lo alone.
const cniConfig = `{
  "cniVersion": "1.0.0",
  "name": "loopback-only",
  "plugins": [{"type": "loopback"}]
}
`

// Containerd is the node's container runtime.
type Containerd struct {
	*Proc
	ctr         string
	Snapshotter string
}

// StartContainerd writes containerd's configuration, starts it, waits for
// it to answer and imports the pods' image. The snapshotter is overlayfs
// where the kernel mounts an overlay, else native, noted in the test log.
func StartContainerd(t testing.TB, l Layout) *Containerd {
	t.Helper()
	dir := l.Path("containerd")
	snapshotter := "overlayfs"
	if err := probeOverlay(filepath.Join(dir, "probe")); err != nil {
		t.Logf("overlayfs unavailable (%v): containerd uses the native snapshotter", err)
		snapshotter = "native"
	}
	cfg := map[string]string{
		"Dir": dir, "Socket": containerdSocket, "Snapshotter": snapshotter, "SandboxImage": imageName,
		"CDISpecDir": cdiSpecDir, "Runc": l.Programs.Runc, "CNIBinDir": cniBinDir,
	}
	config := filepath.Join(dir, "config.toml")
	if err := writeTemplate(config, containerdConfig, cfg); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(filepath.Join(dir, "cni", "10-loopback.conflist"), cniConfig); err != nil {
		t.Fatal(err)
	}
	// containerd finds containerd-shim-runc-v2 on its PATH.
	path := "PATH=" + l.Programs.ContainerdDir + string(os.PathListSeparator) + os.Getenv("PATH")
	c := &Containerd{ctr: l.Programs.Ctr(), Snapshotter: snapshotter}
	c.Proc = StartProc(t, l, "containerd", []string{path}, l.Programs.Containerd(), "--config", config)
	if err := c.waitReady(t.Context()); err != nil {
		t.Fatal(err)
	}
	if out, err := c.Ctr(t.Context(), "images", "import", "--snapshotter", snapshotter, filepath.Join(l.Bin, imageTar)); err != nil {
		t.Fatalf("importing the pods' image: %v\n%s", err, out)
	}
	return c
}

// Ctr runs ctr against this containerd in the CRI's namespace.
func (c *Containerd) Ctr(ctx context.Context, args ...string) ([]byte, error) {
	args = append([]string{"--address", containerdSocket, "--namespace", criNamespace}, args...)
	return exec.CommandContext(ctx, c.ctr, args...).CombinedOutput()
}

// waitReady waits until containerd answers `ctr version`.
func (c *Containerd) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, containerdReady)
	defer cancel()
	var out []byte
	var err error
	for ctx.Err() == nil {
		if out, err = c.Ctr(ctx, "version"); err == nil {
			return nil
		}
		if exited, how := c.Exited(); exited {
			return fmt.Errorf("containerd exited (%s) before it answered; its log:\n%s", how, c.Tail(logTail))
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("containerd did not answer `ctr version` within %v: %v: %s", containerdReady, err, out)
}

// probeOverlay mounts and unmounts an overlay in dir: whether containerd's
// overlayfs snapshotter can work here.
func probeOverlay(dir string) error {
	defer os.RemoveAll(dir)
	var opts []string
	for _, d := range []string{"lower", "upper", "work", "merged"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
		opts = append(opts, d+"dir="+filepath.Join(dir, d))
	}
	if err := syscall.Mount("overlay", filepath.Join(dir, "merged"), "overlay", 0, strings.Join(opts[:3], ",")); err != nil {
		return err
	}
	return syscall.Unmount(filepath.Join(dir, "merged"), 0)
}

func writeTemplate(path string, tmpl *template.Template, data any) error {
	var b strings.Builder
	if err := tmpl.Execute(&b, data); err != nil {
		return err
	}
	return writeFile(path, b.String())
}

// writeFile writes data to path, making its directory.
func writeFile(path, data string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(data), 0o644)
}
