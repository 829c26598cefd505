// Command podcheck is the one program of the node test's container image.
// Built static, it is both the pods' sandbox ("pause") image and their
// workload, so the node needs no registry:
//
//	podcheck [sleep]          wait for SIGTERM or SIGINT, then exit 0
//	podcheck report DIR       write DIR/report.json (package report), then sleep
//	podcheck report-once DIR  write DIR/report.json, then exit 0: a Job's pod
//
// DIR is made if it is not there: a Job's pods, which share their template,
// each write to a directory named after the pod ($(POD_NAME) in args).
//
// The report lists every character and block device node under /dev
// except those the runtime gives every container (Standard), and the
// whole environment: what the pod's devices reached the container as.
package main

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cdiexec/cdi/bridge/e2e/node/internal/report"
)

// Standard are the nodes runc creates in every container (its default
// devices), which say nothing about what a device plugin gave.
var Standard = map[string]bool{
	"/dev/null": true, "/dev/zero": true, "/dev/full": true, "/dev/random": true,
	"/dev/urandom": true, "/dev/tty": true, "/dev/console": true, "/dev/ptmx": true,
}

// skipDirs are file systems the runtime mounts under /dev (pseudo-terminals,
// shared memory, message queues).
var skipDirs = map[string]bool{"/dev/pts": true, "/dev/shm": true, "/dev/mqueue": true}

func main() {
	args := os.Args[1:]
	if len(args) == 0 {
		args = []string{"sleep"}
	}
	switch {
	case args[0] == "sleep" && len(args) == 1:
	case (args[0] == "report" || args[0] == "report-once") && len(args) == 2:
		if err := writeReport(args[1]); err != nil {
			fmt.Fprintln(os.Stderr, "podcheck:", err)
			os.Exit(1)
		}
		if args[0] == "report-once" {
			return
		}
	default:
		fmt.Fprintln(os.Stderr, "usage: podcheck [sleep] | podcheck report DIR | podcheck report-once DIR")
		os.Exit(2)
	}
	// As a container's PID 1, SIGTERM is ignored unless handled: handle it
	// so that pods stop at once instead of after their grace period.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}

// writeReport writes dir/report.json by way of a temporary file, so that
// a reader never sees half a report.
func writeReport(dir string) error {
	devices, err := deviceNodes("/dev")
	if err != nil {
		return err
	}
	r := report.Report{Devices: devices, Env: environment()}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp := filepath.Join(dir, ".report.json.tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, report.FileName))
}

// deviceNodes lists the device nodes under root, sorted by path.
func deviceNodes(root string) ([]report.Device, error) {
	out := []report.Device{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && skipDirs[path]:
			return filepath.SkipDir
		case d.Type()&fs.ModeDevice == 0 || Standard[path]:
			return nil
		}
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return err
		}
		typ := "b"
		if d.Type()&fs.ModeCharDevice != 0 {
			typ = "c"
		}
		out = append(out, report.Device{Path: path, Type: typ, Major: unix.Major(st.Rdev), Minor: unix.Minor(st.Rdev)})
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, err
}

func environment() map[string]string {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}
