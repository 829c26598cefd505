package sysfs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// onDisk writes tree (a name -> "" for a file, "->target" for a link)
// under a new directory and returns it.
func onDisk(t *testing.T, tree map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, what := range tree {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		if target, ok := cutLink(what); ok {
			err = os.Symlink(target, p)
		} else {
			err = os.WriteFile(p, nil, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func cutLink(what string) (string, bool) {
	if len(what) > 2 && what[:2] == "->" {
		return what[2:], true
	}
	return "", false
}

// TestResolveInKernelAgrees holds the kernel's resolution (openat2 with
// RESOLVE_IN_ROOT) to the walk in user space, on the fixture and on
// trees whose links climb above the root, start again from it, loop,
// dangle, or pass through a file, with the root itself behind a link.
func TestResolveInKernelAgrees(t *testing.T) {
	if _, err := unix.Openat2(unix.AT_FDCWD, ".", &unix.OpenHow{Flags: unix.O_PATH, Resolve: unix.RESOLVE_IN_ROOT}); errors.Is(err, syscall.ENOSYS) {
		t.Skip("this kernel has no openat2 (Linux 5.6): HostFS walks links in user space, as TestResolve checks")
	}
	tree := onDisk(t, map[string]string{
		"a/b/c": "", "x/up": "->../a/b", "x/abs": "->/a/b", "x/above": "->../../../a", "x/self": "->self",
		"x/ping": "->pong", "x/pong": "->ping", "x/dangling": "->nowhere", "x/chain": "->up/c", "x/through-file": "->../a/b/c/d",
	})
	behind := filepath.Join(t.TempDir(), "root-link")
	if err := os.Symlink(tree, behind); err != nil {
		t.Fatal(err)
	}
	fixtureRoot, err := filepath.Abs("../../../testdata/root")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string][]string{
		fixtureRoot: {"sys/class/drm/card1/device", "sys/class/drm/renderD131/device", "sys/class/tty/ttyUSB1/device",
			"sys/class/drm/card4/device", "sys/class/tty/ttyUSB9/device", "dev/tty13", "."},
	}
	for _, root := range []string{tree, behind} {
		names[root] = []string{".", "a", "x/up", "x/abs", "x/above", "x/chain", "x/up/c", "x/self", "x/ping",
			"x/dangling", "x/missing", "x/through-file"}
	}
	for root, list := range names {
		for _, name := range list {
			t.Run(filepath.Base(root)+"/"+name, func(t *testing.T) {
				want, wantErr := walkLinks(os.DirFS(root), name, false)
				got, err := HostFS(root).(*hostFS).resolveInKernel(name)
				if errors.Is(err, errNoKernelResolve) {
					t.Fatalf("the kernel did not resolve %q: %v", name, err)
				}
				if got != want || !sameKind(err, wantErr) {
					t.Fatalf("kernel: %q, %v; user space: %q, %v", got, err, want, wantErr)
				}
			})
		}
	}
}

// sameKind says whether two resolution errors mean the same thing.
func sameKind(a, b error) bool {
	if (a == nil) != (b == nil) {
		return false
	}
	for _, kind := range []error{fs.ErrNotExist, ErrLoop, syscall.ENOTDIR} {
		if errors.Is(a, kind) != errors.Is(b, kind) {
			return false
		}
	}
	return true
}

func TestNameUnder(t *testing.T) {
	tests := []struct {
		root, full, want string
		ok               bool
	}{
		{"/", "/", ".", true},
		{"/", "/sys/devices/x", "sys/devices/x", true},
		{"/r", "/r", ".", true},
		{"/r", "/r/sys/x", "sys/x", true},
		{"/r", "/rx/sys", "", false},
		{"/r", "/other", "", false},
		{"/r", "/r/sys/x (deleted)", "", false},
	}
	for _, tt := range tests {
		got, err := nameUnder(tt.root, tt.full)
		if got != tt.want || (err == nil) != tt.ok {
			t.Errorf("nameUnder(%q, %q) = %q, %v; want %q, ok %v", tt.root, tt.full, got, err, tt.want, tt.ok)
		}
	}
}

// withoutKernelResolve makes h resolve as where the kernel cannot.
func withoutKernelResolve(fsys fs.FS) fs.FS {
	h := fsys.(*hostFS)
	h.rootOnce.Do(func() { h.kroot = kernelRoot{fd: -1} })
	return h
}

// BenchmarkResolveClassEntries resolves the device links of the
// fixture's DRM class entries, as DeviceNUMA resolves a class entry's
// device link (drm now reads only the links' text), with a new
// HostFS per round: by the kernel, and by the walk it replaced (the
// floor is the walk: "kernel" should be the faster).
func BenchmarkResolveClassEntries(b *testing.B) {
	root, err := filepath.Abs("../../../testdata/root")
	if err != nil {
		b.Fatal(err)
	}
	// The cards and render nodes, as drm resolves them; connectors
	// (card0-DP-1) have no device link.
	all, err := filepath.Glob(filepath.Join(root, "sys/class/drm/*[0-9]"))
	if err != nil {
		b.Fatal(err)
	}
	var entries []string
	for _, e := range all {
		if !strings.Contains(filepath.Base(e), "-") {
			entries = append(entries, e)
		}
	}
	for _, way := range []struct {
		name string
		fsys func() fs.FS
	}{
		{"walk", func() fs.FS { return withoutKernelResolve(HostFS(root)) }},
		{"kernel", func() fs.FS { return HostFS(root) }},
	} {
		b.Run(way.name, func(b *testing.B) {
			for b.Loop() {
				fsys := way.fsys()
				for _, e := range entries {
					if _, err := Resolve(fsys, "sys/class/drm/"+filepath.Base(e)+"/device"); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
