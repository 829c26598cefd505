package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
)

// layoutEnv carries the Layout, as JSON, from the outer test process to
// the one it re-executes in the namespaces; its presence says "inside".
const layoutEnv = "CDI_NODE_E2E_LAYOUT"

// Layout is what the outer process prepared for the node.
type Layout struct {
	// Root holds the node's files: overlay upper directories, the
	// kubelet's root, containerd's root and state, logs. The outer
	// process removes it once the namespaces are gone (keeping the logs
	// when the test failed).
	Root string
	// Bin holds what the outer process built: cdi-bridge, the plugins
	// and the pods' image tarball.
	Bin string
	// Repo is the main module's directory (bridge/deploy's manifests).
	Repo string
	// BridgeImage are the names of the bridge's image in Bin: the
	// manifests' one first, then its version tag.
	BridgeImage []string
	// CgroupRoot is the kubelet's cgroupRoot, e.g. /cdi-node-e2e-1234,
	// made in every hierarchy by the outer process.
	CgroupRoot string
	Programs   Programs
	// LogDir, when set, is where the programs' logs go instead of
	// Root/logs: a node of its own (Sub) logs under the outer one's
	// logs, which are kept when the test fails.
	LogDir string
}

// Path is a path under Root.
func (l Layout) Path(elem ...string) string {
	return filepath.Join(append([]string{l.Root}, elem...)...)
}

// Logs is where every program's log goes.
func (l Layout) Logs() string {
	if l.LogDir != "" {
		return l.LogDir
	}
	return l.Path("logs")
}

// Sub is the layout of a second node in the same namespaces, after the
// first has stopped: its files under Root/name, its logs under
// Logs()/name.
func (l Layout) Sub(name string) Layout {
	s := l
	s.Root, s.LogDir = l.Path(name), filepath.Join(l.Logs(), name)
	return s
}

// InsideLayout returns the Layout when this process is the re-executed
// one, in the namespaces.
func InsideLayout() (*Layout, bool, error) {
	data, ok := os.LookupEnv(layoutEnv)
	if !ok {
		return nil, false, nil
	}
	var l Layout
	if err := json.Unmarshal([]byte(data), &l); err != nil {
		return nil, true, fmt.Errorf("%s: %w", layoutEnv, err)
	}
	return &l, true, nil
}

// RunOutside prepares the node's files, runs this test binary again with
// the same arguments in new mount, network and PID namespaces, cleans up
// after it and returns its exit code.
func RunOutside(progs Programs) int {
	code, err := runOutside(progs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "node e2e:", err)
		if code == 0 {
			code = 2
		}
	}
	return code
}

func runOutside(progs Programs) (code int, err error) {
	l := Layout{Programs: progs, CgroupRoot: "/cdi-node-e2e-" + strconv.Itoa(os.Getpid())}
	if l.Root, err = os.MkdirTemp("", "cdi-node-e2e-"); err != nil {
		return 0, err
	}
	defer func() { err = errors.Join(err, removeRoot(l, code != 0 || err != nil)) }()
	l.Bin = l.Path("bin")
	if l.Repo, l.BridgeImage, err = buildArtifacts(l.Bin); err != nil {
		return 0, err
	}
	cgroups, err := makeCgroupRoot(l.CgroupRoot)
	defer func() { err = errors.Join(err, removeCgroups(cgroups)) }()
	if err != nil {
		return 0, err
	}
	return reexec(l)
}

// reexec runs the test binary in the namespaces and waits for it. Being
// init of its PID namespace, its exit ends every process it left.
func reexec(l Layout) (int, error) {
	data, err := json.Marshal(l)
	if err != nil {
		return 0, err
	}
	cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
	cmd.Env = append(os.Environ(), layoutEnv+"="+string(data))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWNET | syscall.CLONE_NEWPID,
		// If this process is killed, the namespaces go with it.
		Pdeathsig: syscall.SIGKILL,
	}
	err = cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), nil
	}
	if err != nil {
		return 0, fmt.Errorf("running the test in new namespaces: %w", err)
	}
	return 0, nil
}

// removeRoot removes the node's directory. After a failure the logs are
// moved out first, to a directory of their own that is kept.
func removeRoot(l Layout, failed bool) error {
	if failed {
		if kept, err := os.MkdirTemp("", "cdi-node-e2e-logs-"); err == nil {
			if err := os.Rename(l.Logs(), filepath.Join(kept, "logs")); err != nil {
				os.Remove(kept)
			} else {
				fmt.Fprintf(os.Stderr, "node e2e: logs kept in %s\n", filepath.Join(kept, "logs"))
			}
		}
	}
	return os.RemoveAll(l.Root)
}
