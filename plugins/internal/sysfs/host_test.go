package sysfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestHostFSAgreesWithDirFS runs the lookups discovery makes on the
// fixture through HostFS and through os.DirFS: they must not differ.
func TestHostFSAgreesWithDirFS(t *testing.T) {
	root, err := filepath.Abs("../../../testdata/root")
	if err != nil {
		t.Fatal(err)
	}
	entries := []string{"sys/class/tty/ttyUSB0", "sys/class/tty/ttyUSB1", "sys/class/tty/ttyACM0",
		"sys/class/drm/card0", "sys/class/drm/card3", "sys/class/drm/renderD129", "sys/class/drm/card4", "sys/class/tty/ttyUSB9"}
	plain, host := os.DirFS(root), HostFS(root)
	for _, e := range entries {
		t.Run(e, func(t *testing.T) {
			for range 2 { // the second round is answered from memory
				wantDir, wantErr := Resolve(plain, e+"/device")
				gotDir, gotErr := Resolve(host, e+"/device")
				if gotDir != wantDir || (gotErr == nil) != (wantErr == nil) {
					t.Fatalf("Resolve = %q, %v; os.DirFS says %q, %v", gotDir, gotErr, wantDir, wantErr)
				}
				wantN, _ := DeviceNUMA(plain, e)
				gotN, err := DeviceNUMA(host, e)
				if err != nil || numaValue(gotN) != numaValue(wantN) {
					t.Fatalf("DeviceNUMA = %d, %v; os.DirFS says %d", numaValue(gotN), err, numaValue(wantN))
				}
				if wantErr != nil {
					continue
				}
				want, wantErr := ReadString(plain, wantDir+"/uevent")
				got, gotErr := ReadString(host, wantDir+"/uevent")
				if got != want || (gotErr == nil) != (wantErr == nil) {
					t.Fatalf("ReadString(uevent) = %q, %v; os.DirFS says %q, %v", got, gotErr, want, wantErr)
				}
			}
		})
	}
}

// TestHostFSRemembers checks that metadata is read once per HostFS: a
// change made after the first lookup is seen only by a new HostFS.
func TestHostFSRemembers(t *testing.T) {
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "f"), []byte("1\n"), 0o644))
	must(os.Symlink("f", filepath.Join(dir, "l")))
	h := HostFS(dir).(fs.ReadLinkFS)
	listed := func(h fs.FS) []string {
		t.Helper()
		entries, err := fs.ReadDir(h, ".")
		must(err)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return names
	}
	if got := strings.Join(listed(h), ","); got != "f,l" {
		t.Fatalf("ReadDir(.) = %s, want f,l", got)
	}
	check := func(h fs.ReadLinkFS, wantStat bool, wantTarget string) {
		t.Helper()
		if _, err := fs.Stat(h, "f"); (err == nil) != wantStat {
			t.Errorf("Stat(f) = %v, want exists %v", err, wantStat)
		}
		if _, err := h.Lstat("f"); (err == nil) != wantStat {
			t.Errorf("Lstat(f) = %v, want exists %v", err, wantStat)
		}
		if got, _ := h.ReadLink("l"); got != wantTarget {
			t.Errorf("ReadLink(l) = %q, want %q", got, wantTarget)
		}
		if got, err := Resolve(h, "l"); (err == nil) != wantStat || (wantStat && got != "f") {
			t.Errorf("Resolve(l) = %q, %v; want f: %v", got, err, wantStat)
		}
	}
	check(h, true, "f")
	must(os.Remove(filepath.Join(dir, "f")))
	must(os.Remove(filepath.Join(dir, "l")))
	must(os.Symlink("g", filepath.Join(dir, "l")))
	check(h, true, "f")
	check(HostFS(dir).(fs.ReadLinkFS), false, "g")
	if got := strings.Join(listed(h), ","); got != "f,l" {
		t.Errorf("ReadDir(.) after the change = %s, want the remembered f,l", got)
	}
	if got := strings.Join(listed(HostFS(dir)), ","); got != "l" {
		t.Errorf("a new HostFS lists %s, want l", got)
	}
	entries, _ := h.(fs.ReadDirFS).ReadDir(".")
	entries[0] = nil // a caller's own slice
	if got := strings.Join(listed(h), ","); got != "f,l" {
		t.Errorf("ReadDir(.) after a caller changed its slice = %s, want f,l", got)
	}
}

func TestHostFSReadString(t *testing.T) {
	dir := t.TempDir()
	// "long" and "full" outgrow the first read's buffer; "full" is the
	// largest attribute there can be.
	long, full := strings.Repeat("l", firstRead+1), strings.Repeat("f", maxAttrSize)
	files := map[string]string{"vendor": " 0x10de\n", "big": strings.Repeat("x", maxAttrSize+1), "long": long, "full": full}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	h := HostFS(dir)
	for name, want := range map[string]string{"vendor": "0x10de", "long": long, "full": full} {
		if got, err := ReadString(h, name); got != want || err != nil {
			t.Errorf("ReadString(%s) = %d bytes %.20q..., %v; want %d bytes", name, len(got), got, err, len(want))
		}
	}
	tests := []struct {
		name string
		want error // nil: any error
	}{
		{"missing", fs.ErrNotExist},
		{"../escape", fs.ErrInvalid},
		{"/abs", fs.ErrInvalid},
		{"big", nil},
		{"sub", nil},
	}
	for _, tt := range tests {
		_, err := ReadString(h, tt.name)
		if err == nil || (tt.want != nil && !errors.Is(err, tt.want)) {
			t.Errorf("ReadString(%q) = %v, want an error (%v)", tt.name, err, tt.want)
		}
	}
}

func TestReadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "boot_id")
	if err := os.WriteFile(path, []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		limit int
		want  string
	}{{64, "0123456789"}, {4, "0123"}, {10, "0123456789"}} {
		if got, err := ReadFile(path, tc.limit); err != nil || string(got) != tc.want {
			t.Errorf("ReadFile(limit %d) = %q, %v; want %q", tc.limit, got, err, tc.want)
		}
	}
	if _, err := ReadFile(path+".missing", 64); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing file: %v, want fs.ErrNotExist", err)
	}
}

// HostFS lists directories itself (readDir): its entries and errors are
// os.DirFS's, a link to a directory, a file and what is missing included.
func TestHostFSReadDirAgreesWithDirFS(t *testing.T) {
	root := t.TempDir()
	for _, err := range []error{
		os.WriteFile(filepath.Join(root, "file"), nil, 0o644), os.Mkdir(filepath.Join(root, "d"), 0o755),
		os.WriteFile(filepath.Join(root, "d", "b"), nil, 0o644), os.WriteFile(filepath.Join(root, "d", "a"), nil, 0o644),
		os.Symlink("d", filepath.Join(root, "link")),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{".", "d", "link", "file", "missing", "../d"} {
		t.Run(name, func(t *testing.T) {
			want, wantErr := fs.ReadDir(os.DirFS(root), name)
			got, err := HostFS(root).(fs.ReadDirFS).ReadDir(name)
			if fmt.Sprint(got, err) != fmt.Sprint(want, wantErr) {
				t.Errorf("HostFS: %v, %v; os.DirFS: %v, %v", got, err, want, wantErr)
			}
		})
	}
}

// TestHostFSResolvesAsDirFS holds Resolve over HostFS, which walks the
// links through its remembered Lstat and ReadLink, to the walk over
// os.DirFS: on the fixture, and on trees whose links climb above the
// root, start again from it, loop, dangle, or pass through a file, with
// the root itself behind a link. An earlier HostFS walked under the lock
// its own lookups take, and the plugin deadlocked.
func TestHostFSResolvesAsDirFS(t *testing.T) {
	fixtureRoot, err := filepath.Abs("../../../testdata/root")
	if err != nil {
		t.Fatal(err)
	}
	tree := onDisk(t, map[string]string{
		"a/b/c": "", "x/up": "->../a/b", "x/abs": "->/a/b", "x/above": "->../../../a", "x/self": "->self",
		"x/ping": "->pong", "x/pong": "->ping", "x/dangling": "->nowhere", "x/chain": "->up/c", "x/through-file": "->../a/b/c/d",
	})
	behind := filepath.Join(t.TempDir(), "root-link")
	if err := os.Symlink(tree, behind); err != nil {
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
				h := HostFS(root)
				for range 2 { // the second answer is remembered
					got, err := Resolve(h, name)
					if got != want || !sameKind(err, wantErr) {
						t.Fatalf("HostFS: %q, %v; os.DirFS: %q, %v", got, err, want, wantErr)
					}
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
		if target, ok := strings.CutPrefix(what, "->"); ok {
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
