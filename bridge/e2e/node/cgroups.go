package node

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// cgroupRemoveWait bounds the wait for a cgroup to empty: its last tasks
// may still be exiting when the namespaces' init has gone.
const cgroupRemoveWait = 10 * time.Second

// makeCgroupRoot makes the kubelet's cgroupRoot, name, in every cgroup
// hierarchy (the kubelet refuses a root that a hierarchy lacks), and
// returns the directories made. A new cpuset cgroup has no CPUs and no
// memory nodes: it gets its parent's, which the kubelet's and runc's
// cgroups below it then inherit.
func makeCgroupRoot(name string) ([]string, error) {
	mounts, err := cgroupMounts()
	if err != nil {
		return nil, err
	}
	var made []string
	for _, m := range mounts {
		dir := filepath.Join(m, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return made, fmt.Errorf("making the kubelet's cgroup root: %w", err)
		}
		made = append(made, dir)
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			v, err := os.ReadFile(filepath.Join(m, f))
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err == nil {
				err = os.WriteFile(filepath.Join(dir, f), v, 0o644)
			}
			if err != nil {
				return made, fmt.Errorf("cgroup %s: %w", dir, err)
			}
		}
	}
	return made, nil
}

// cgroupMounts lists the mount points of cgroup (v1 and v2) file systems.
func cgroupMounts() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		// ... mount-point ... - fstype source options
		fields := strings.Fields(s.Text())
		sep := slices.Index(fields, "-")
		if sep < 0 || sep+1 >= len(fields) || len(fields) < 5 {
			continue
		}
		if t := fields[sep+1]; t == "cgroup" || t == "cgroup2" {
			out = append(out, fields[4])
		}
	}
	return out, s.Err()
}

// removeCgroups removes each directory with every cgroup below it,
// deepest first, waiting for cgroups whose tasks are still exiting.
func removeCgroups(dirs []string) error {
	var errs []error
	for _, dir := range dirs {
		var tree []string
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				tree = append(tree, p)
			}
			return err
		})
		if err != nil {
			errs = append(errs, err)
		}
		for _, p := range slices.Backward(tree) {
			errs = append(errs, rmdirWait(p))
		}
	}
	return errors.Join(errs...)
}

func rmdirWait(dir string) error {
	deadline := time.Now().Add(cgroupRemoveWait)
	for {
		err := syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("removing cgroup %s: %w", dir, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
