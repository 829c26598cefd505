package node

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// NodeIP is the node's address, on lo in the node's network namespace:
// the kubelet refuses a loopback address, and this kernel has no dummy
// links.
const NodeIP = "10.254.254.1"

// privateDirs are overlaid in the node's mount namespace: the node reads
// the host's files there, and what it writes stays in the test's directory.
var privateDirs = []string{"/run", "/var/lib", "/var/log"}

// kubeletSysctls are the kernel settings the kubelet checks at start
// (k8s.io/kubernetes/pkg/kubelet/cm setupKernelTunables), with the values
// it wants. The node's /proc/sys shows it these, from files of the test's
// own, so that it changes none of the machine's.
var kubeletSysctls = map[string]string{
	"vm/overcommit_memory":      "1",
	"vm/panic_on_oom":           "0",
	"kernel/panic":              "10",
	"kernel/panic_on_oops":      "1",
	"kernel/keys/root_maxkeys":  "1000000",
	"kernel/keys/root_maxbytes": "25000000",
}

// Enter makes the namespaces this process was started in into the node's:
// private mounts, a /proc of the new PID namespace, the overlays, the
// kubelet's directory, the sysctl files, and lo with the node's IP. It
// returns a note when overlayfs was unavailable and an empty private
// directory replaced the host's instead.
func Enter(l Layout) (note string, err error) {
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return "", fmt.Errorf("making / private: %w", err)
	}
	if err := syscall.Mount("proc", "/proc", "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
		return "", fmt.Errorf("mounting /proc: %w", err)
	}
	for _, dir := range privateDirs {
		if n, err := privatize(l, dir); err != nil {
			return "", err
		} else if n != "" {
			note = n
		}
	}
	if err := bindDir(l.Path("kubelet"), kubeletDir); err != nil {
		return "", err
	}
	if err := os.MkdirAll(cdiSpecDir, 0o755); err != nil {
		return "", err
	}
	if err := coverSysctls(l); err != nil {
		return "", err
	}
	return note, setUpLoopback(l.Programs.IP)
}

// privatize overlays dir with an upper directory under Root, or, where
// overlayfs is unavailable, mounts an empty private directory over it.
func privatize(l Layout, dir string) (note string, err error) {
	upper, overlayErr := overlay(l, dir)
	if overlayErr == nil {
		return "", nil
	}
	if err := bindDir(upper, dir); err != nil {
		return "", fmt.Errorf("overlay on %s: %w; and then %w", dir, overlayErr, err)
	}
	return fmt.Sprintf("overlayfs unavailable (%v): the node's %v are empty private directories", overlayErr, privateDirs), nil
}

// overlay mounts an overlay on dir whose upper directory, which it
// returns, is under Root: the node reads dir's files and writes its own
// beside them, in the test's directory.
func overlay(l Layout, dir string) (upper string, err error) {
	base := l.Path("overlay", strings.ReplaceAll(strings.Trim(dir, "/"), "/", "-"))
	upper, work := filepath.Join(base, "upper"), filepath.Join(base, "work")
	for _, d := range []string{upper, work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return upper, err
		}
	}
	opts := "lowerdir=" + dir + ",upperdir=" + upper + ",workdir=" + work
	return upper, syscall.Mount("overlay", dir, "overlay", 0, opts)
}

// bindDir bind-mounts src over dst, making either if need be. A dst
// that is not there yet is made under one of privateDirs, already
// private, so never on the host.
func bindDir(src, dst string) error {
	for _, d := range []string{src, dst} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := syscall.Mount(src, dst, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind-mounting %s over %s: %w", src, dst, err)
	}
	return nil
}

// coverSysctls bind-mounts a file holding the wanted value over each of
// kubeletSysctls' /proc/sys entries.
func coverSysctls(l Layout) error {
	dir := l.Path("sysctl")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, value := range kubeletSysctls {
		file := filepath.Join(dir, strings.ReplaceAll(name, "/", "."))
		if err := os.WriteFile(file, []byte(value+"\n"), 0o644); err != nil {
			return err
		}
		target := filepath.Join("/proc/sys", name)
		if err := syscall.Mount(file, target, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("covering %s: %w", target, err)
		}
	}
	return nil
}

// setUpLoopback brings lo up with the node's IP: the namespace's only
// link, so nothing the node does reaches the host's network.
func setUpLoopback(ip string) error {
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"addr", "add", NodeIP + "/32", "dev", "lo"},
	} {
		if out, err := exec.Command(ip, args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}
