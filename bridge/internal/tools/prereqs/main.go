// Command prereqs checks, before make test builds anything, that the
// machine has the programs the tests run, and says for each missing one
// which tests it costs and how to get it. Without CI set a missing
// program is a warning (those tests skip, saying so); with CI set it is
// an error, as the tests themselves fail then.
package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
)

// prereq is one program the tests need.
type prereq struct {
	what    string // the program, or a file
	found   func() bool
	needs   string // which tests need it
	install string // the Debian package
}

func prereqs() []prereq {
	onPath := func(name string) func() bool {
		return func() bool { _, err := exec.LookPath(name); return err == nil }
	}
	exists := func(path string) func() bool {
		return func() bool { _, err := os.Stat(path); return err == nil }
	}
	node := "the real node (make e2e)"
	return []prereq{
		{"etcd", onPath("etcd"), "every Kubernetes test: the kube-apiserver they start stores in it", "etcd-server"},
		{"runc", onPath("runc"), node + ": containerd runs the pods with it", "runc"},
		{"ip", onPath("ip"), node + ": the node's network namespace", "iproute2"},
		{"iptables", onPath("iptables"), node + ": what a kubelet host has", "iptables"},
		{"unshare", onPath("unshare"), node + ": its private namespaces", "util-linux"},
		{"/usr/lib/cni/loopback", exists("/usr/lib/cni/loopback"), node + ": the pods' loopback network", "containernetworking-plugins"},
	}
}

func main() {
	os.Exit(check(os.Stdout, prereqs(), os.Getenv("CI") != "", os.Geteuid() == 0))
}

// check prints what is missing and returns the exit status.
func check(w io.Writer, list []prereq, ci, root bool) int {
	var missing []string
	for _, p := range list {
		if p.found() {
			continue
		}
		fmt.Fprintf(w, "missing %s, needed by %s (Debian: apt-get install %s)\n", p.what, p.needs, p.install)
		missing = append(missing, p.install)
	}
	if !root {
		fmt.Fprintln(w, "not root: the real node (make e2e) needs root for its namespaces and mounts, and skips without it")
	}
	switch {
	case len(missing) == 0:
		fmt.Fprintln(w, "prerequisites: all there")
		return 0
	case ci:
		fmt.Fprintf(w, "CI is set, so the tests that need them would fail: apt-get install %s\n", strings.Join(missing, " "))
		return 1
	default:
		fmt.Fprintf(w, "the tests that need them will skip, saying so; to run them: apt-get install %s\n", strings.Join(missing, " "))
		return 0
	}
}
