package node

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// ErrUnavailable is wrapped when something the node needs is missing: a
// program, or root. With the CI environment variable set the test fails
// on it, else it skips.
var ErrUnavailable = errors.New("the node test cannot run here")

// ErrNotRoot is wrapped when the test does not run as root, which it
// needs for namespaces, mounts and cgroups. The test skips on it even in
// CI: it is how the test is run, not what the machine lacks.
var ErrNotRoot = fmt.Errorf("%w: it needs root", ErrUnavailable)

// cniBinDir holds Debian's CNI plugins (containernetworking-plugins),
// among them loopback, the one the node's network configuration names.
const cniBinDir = "/usr/lib/cni"

// Programs are the node's programs. The first five are built by the
// Makefile (`make e2e`) and named by environment variables; the others
// come from Debian's packages.
type Programs struct {
	APIServer         string // $KUBE_APISERVER
	Kubelet           string // $KUBELET
	Scheduler         string // $KUBE_SCHEDULER
	ControllerManager string // $KUBE_CONTROLLER_MANAGER
	ContainerdDir     string // $CONTAINERD_BIN_DIR: containerd, ctr, containerd-shim-runc-v2
	Etcd, Runc        string // etcd-server, runc
	IP                string // iproute2
}

// Ctr is containerd's command-line client.
func (p Programs) Ctr() string { return filepath.Join(p.ContainerdDir, "ctr") }

// Containerd is the daemon.
func (p Programs) Containerd() string { return filepath.Join(p.ContainerdDir, "containerd") }

// FindPrograms finds every program, or says what is missing and how to
// get it, wrapping ErrUnavailable.
func FindPrograms() (Programs, error) {
	if os.Geteuid() != 0 {
		return Programs{}, ErrNotRoot
	}
	var p Programs
	var missing []error
	fromEnv := func(dst *string, name, what string, files ...string) {
		*dst = os.Getenv(name)
		if *dst == "" {
			missing = append(missing, fmt.Errorf("%s is not set (the %s; `make e2e` builds it and sets it)", name, what))
			return
		}
		for _, f := range files {
			if err := isExecutable(filepath.Join(*dst, f)); err != nil {
				missing = append(missing, fmt.Errorf("%s: %w", name, err))
			}
		}
	}
	fromEnv(&p.APIServer, "KUBE_APISERVER", "kube-apiserver binary", "")
	fromEnv(&p.Kubelet, "KUBELET", "kubelet binary", "")
	fromEnv(&p.Scheduler, "KUBE_SCHEDULER", "kube-scheduler binary", "")
	fromEnv(&p.ControllerManager, "KUBE_CONTROLLER_MANAGER", "kube-controller-manager binary", "")
	fromEnv(&p.ContainerdDir, "CONTAINERD_BIN_DIR", "directory of containerd, ctr and containerd-shim-runc-v2",
		"containerd", "ctr", "containerd-shim-runc-v2")
	onPath := func(dst *string, name, pkg string) {
		var err error
		if *dst, err = exec.LookPath(name); err != nil {
			missing = append(missing, fmt.Errorf("%s is not on the PATH (apt-get install %s)", name, pkg))
		}
	}
	onPath(&p.Etcd, "etcd", "etcd-server")
	onPath(&p.Runc, "runc", "runc")
	onPath(&p.IP, "ip", "iproute2")
	if err := isExecutable(filepath.Join(cniBinDir, "loopback")); err != nil {
		missing = append(missing, fmt.Errorf("%w (apt-get install containernetworking-plugins)", err))
	}
	if len(missing) > 0 {
		return p, fmt.Errorf("%w: %w", ErrUnavailable, errors.Join(missing...))
	}
	return p, nil
}

// isExecutable fails unless path is an executable regular file.
func isExecutable(path string) error {
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !info.Mode().IsRegular() || info.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", path)
	}
	return nil
}
