package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/cdiexec/cdi/bridge/deploy/internal/nodedefaults"
)

// confD is the repository's conf.d, which holds the last version of each
// withdrawn default that releases installed.
const confD = "../../../conf.d"

// shipped is the version of rel in conf.d.
func shipped(t *testing.T, rel string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(confD, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestWithdraw upgrades hosts that earlier releases installed the virtual
// consoles' and the example cameras' drop-ins on: an unchanged one that
// the record lists goes, anything else stays.
func TestWithdraw(t *testing.T) {
	const tty, camera = "tty.d/generic.conf", "camera.d/endpoint.conf"
	for _, tc := range []struct {
		name string
		// host lays out the host's drop-in directory; it returns what the
		// record lists.
		host func(t *testing.T, dir string) []string
		// carried are drop-ins the image carries besides gpu.d/drm.conf,
		// as conf.d has them.
		carried []string
		// removed are gone after the run; the other withdrawn defaults are
		// as host left them. log is a line the run prints.
		removed []string
		log     string
	}{
		{
			name: "unchanged and recorded: removed",
			host: func(t *testing.T, dir string) []string {
				write(t, filepath.Join(dir, tty), shipped(t, tty), 0o644)
				write(t, filepath.Join(dir, camera), shipped(t, camera), 0o644)
				return []string{tty, camera}
			},
			removed: []string{tty, camera},
			log:     "removed %s/" + tty + ": a default of an earlier release",
		},
		{
			name: "edited: kept",
			host: func(t *testing.T, dir string) []string {
				write(t, filepath.Join(dir, tty), strings.Replace(shipped(t, tty), "12", "7", 1), 0o644)
				return []string{tty}
			},
			log: "kept %s/" + tty + ": no longer a default, but edited here",
		},
		{
			name: "unchanged but not recorded, so written by the operator: kept",
			host: func(t *testing.T, dir string) []string {
				write(t, filepath.Join(dir, tty), shipped(t, tty), 0o644)
				return nil
			},
		},
		{
			name: "a link to an unchanged copy: kept, and its target",
			host: func(t *testing.T, dir string) []string {
				target := filepath.Join(dir, "copy")
				write(t, target, shipped(t, tty), 0o644)
				symlink(t, target, filepath.Join(dir, tty))
				return []string{tty}
			},
			log: "kept %s/" + tty + ": no longer a default, and not a regular file here",
		},
		{
			name: "a FIFO: kept, never opened",
			host: func(t *testing.T, dir string) []string {
				if err := os.MkdirAll(filepath.Join(dir, "tty.d"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := syscall.Mkfifo(filepath.Join(dir, tty), 0o644); err != nil {
					t.Fatal(err)
				}
				return []string{tty}
			},
			log: "kept %s/" + tty + ": no longer a default, and not a regular file here",
		},
		{
			name: "a directory: kept",
			host: func(t *testing.T, dir string) []string {
				write(t, filepath.Join(dir, tty, "inside"), "x", 0o644)
				return []string{tty}
			},
			log: "kept %s/" + tty + ": no longer a default, and not a regular file here",
		},
		{
			name: "recorded and already gone: nothing to do",
			host: func(t *testing.T, dir string) []string { return []string{tty, camera} },
		},
		{
			name: "still carried by the image: not withdrawn",
			host: func(t *testing.T, dir string) []string {
				write(t, filepath.Join(dir, tty), shipped(t, tty), 0o644)
				return []string{tty}
			},
			carried: []string{tty},
			log:     "kept %s/" + tty + ": the host's own",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, log := upgrade(t, tc.carried)
			recorded := tc.host(t, in.dropInsTo)
			writeRecordOf(t, in, recorded)
			before := snapshot(t, in.dropInsTo)
			run(t, in)
			for _, rel := range []string{tty, camera} {
				path := filepath.Join(in.dropInsTo, rel)
				if slices.Contains(tc.removed, rel) {
					if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
						t.Errorf("%s not removed (%v)", path, err)
					}
					continue
				}
				if got := describe(t, path); got != before[rel] {
					t.Errorf("%s: %s, was %s", path, got, before[rel])
				}
			}
			if copyOf := filepath.Join(in.dropInsTo, "copy"); describe(t, copyOf) != before["copy"] {
				t.Errorf("the link's target changed: %s", describe(t, copyOf))
			}
			if want := strings.ReplaceAll(tc.log, "%s", in.dropInsTo); !strings.Contains(log.String(), want) {
				t.Errorf("the log has no %q:\n%s", want, log)
			}
			record, err := readRecord(filepath.Join(in.dropInsTo, recordName))
			if err != nil {
				t.Fatal(err)
			}
			for _, rel := range recorded {
				if !record[rel] {
					t.Errorf("the record lost %s: an older image would install it again", rel)
				}
			}
		})
	}
}

// upgrade is an installer from an image carrying gpu.d/drm.conf and
// carried (conf.d's) to a host, and its log.
func upgrade(t *testing.T, carried []string) (*installer, *bytes.Buffer) {
	t.Helper()
	in := image(t)
	if err := os.RemoveAll(in.dropInsFrom); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(in.dropInsFrom, "gpu.d/drm.conf"), "default gpu", 0o644)
	for _, rel := range carried {
		write(t, filepath.Join(in.dropInsFrom, rel), shipped(t, rel), 0o644)
	}
	log := &bytes.Buffer{}
	in.log = log
	return in, log
}

func writeRecordOf(t *testing.T, in *installer, rels []string) {
	t.Helper()
	if err := os.MkdirAll(in.dropInsTo, 0o755); err != nil {
		t.Fatal(err)
	}
	record := map[string]bool{}
	for _, rel := range rels {
		record[rel] = true
	}
	if err := writeRecord(filepath.Join(in.dropInsTo, recordName), record); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// describe is what a path is, never following a link: its type, and its
// content or target.
func describe(t *testing.T, path string) string {
	t.Helper()
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "absent"
	case err != nil:
		t.Fatal(err)
	case fi.Mode()&os.ModeSymlink != 0:
		target, _ := os.Readlink(path)
		return "a link to " + target
	case fi.Mode().IsRegular():
		data, _ := os.ReadFile(path)
		return "a file holding " + string(data)
	}
	return fi.Mode().Type().String()
}

// snapshot describes the withdrawn defaults and "copy" under dir.
func snapshot(t *testing.T, dir string) map[string]string {
	out := map[string]string{}
	for _, rel := range []string{"tty.d/generic.conf", "camera.d/endpoint.conf", "copy"} {
		out[rel] = describe(t, filepath.Join(dir, rel))
	}
	return out
}

// TestWithdrawals: a withdrawn default is no longer a node's default, is
// still one of conf.d's files (the tests' and the demo's), and its sums
// are exactly those of the versions git history holds of it from while
// the image carried it.
func TestWithdrawals(t *testing.T) {
	defaults, err := nodedefaults.Read(confD)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range withdrawals() {
		t.Run(w.rel, func(t *testing.T) {
			if slices.Contains(defaults, w.rel) {
				t.Errorf("%s is withdrawn and on %s", w.rel, nodedefaults.File)
			}
			shipped(t, w.rel)
			sums := installedVersions(t, w.rel)
			if slices.Sort(sums); !slices.Equal(sums, slices.Sorted(slices.Values(w.sums))) {
				t.Errorf("sums %q, want those of the versions git history has (%q)", w.sums, sums)
			}
		})
	}
}

// installedVersions are the SHA-256 sums of every version of conf.d/rel
// committed while the image carried it: before node-defaults.list, the
// image carried all of conf.d, then what the list named.
func installedVersions(t *testing.T, rel string) []string {
	t.Helper()
	git := func(args ...string) ([]byte, error) {
		return exec.Command("git", append([]string{"-C", confD}, args...)...).Output()
	}
	if shallow, err := git("rev-parse", "--is-shallow-repository"); err != nil || string(shallow) != "false\n" {
		t.Skipf("no complete git history to check against (%v, shallow: %q)", err, shallow)
	}
	commits, err := git("log", "--format=%H", "--", rel)
	if err != nil {
		t.Fatal(err)
	}
	var sums []string
	for _, c := range strings.Fields(string(commits)) {
		data, err := git("show", c+":conf.d/"+rel)
		if err != nil {
			continue // the commit deleted it
		}
		if list, err := git("show", c+":conf.d/"+nodedefaults.File); err == nil && !listed(list, rel) {
			continue // a version no image carried
		}
		sum := sha256.Sum256(data)
		if s := hex.EncodeToString(sum[:]); !slices.Contains(sums, s) {
			sums = append(sums, s)
		}
	}
	return sums
}

// listed says whether a node-defaults.list names rel on a line of its own.
func listed(list []byte, rel string) bool {
	for line := range strings.Lines(string(list)) {
		if strings.TrimSpace(line) == rel {
			return true
		}
	}
	return false
}
