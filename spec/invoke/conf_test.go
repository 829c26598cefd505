package invoke_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/invoke"
)

func conf(typ, name string) string {
	return `{"cdiVersion":"0.1.0","name":"` + name + `","type":"` + typ + `","plugin":"testplugin"}`
}

// writeFiles creates files (path relative to root: contents); a path
// ending in "/" is a directory.
func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for rel, data := range files {
		p := filepath.Join(root, rel)
		if strings.HasSuffix(rel, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func ids(confs []*invoke.Conf) []string {
	var out []string
	for _, c := range confs {
		out = append(out, filepath.Base(c.Path))
	}
	return out
}

func TestLoadConfs(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	writeFiles(t, root, map[string]string{
		"tty.d/b.conf":         conf("tty", "b"),
		"tty.d/a.json":         conf("tty", "a"),
		"tty.d/c.conf":         conf("tty", "c") + "\n",
		"tty.d/.hidden.conf":   "not even json",
		"tty.d/.conf":          "not even json",
		"tty.d/b.conf~":        "not even json",
		"tty.d/b.conf.orig":    "not even json",
		"tty.d/README":         "not even json",
		"tty.d/sub.conf/":      "",
		"gpu.d/bad.conf":       `{"cdiVersion":"0.1.0",`,
		"gpu.d/good.conf":      conf("gpu", "good"),
		"gpu.d/wrongtype.conf": conf("tty", "w"),
	})

	confs, err := invoke.LoadConfs(root, "tty")
	if err != nil || !reflect.DeepEqual(ids(confs), []string{"a.json", "b.conf", "c.conf"}) {
		t.Fatalf("LoadConfs(tty) = %v, %v", ids(confs), err)
	}
	if c := confs[2]; string(c.Bytes) != conf("tty", "c")+"\n" || c.Name != "c" || c.ID() != "c" || c.Type != "tty" {
		t.Errorf("conf c = %+v, want the file's bytes unchanged", c)
	}

	confs, err = invoke.LoadConfs(root, "gpu")
	if !reflect.DeepEqual(ids(confs), []string{"good.conf"}) {
		t.Errorf("LoadConfs(gpu) kept %v, want the good drop-in despite the bad ones", ids(confs))
	}
	bad := filepath.Join(root, "gpu.d", "bad.conf")
	if !errors.Is(err, spec.ErrMalformed) || !strings.Contains(err.Error(), bad) {
		t.Errorf("error %v does not name %s as malformed", err, bad)
	}
	var mismatch *spec.Error
	if !errors.As(err, &mismatch) || mismatch.Code != spec.CodeTypeMismatch || spec.CodeOf(err) != spec.CodeTypeMismatch {
		t.Fatalf("error %v holds no code 9", err)
	}
	for _, s := range []string{filepath.Join(root, "gpu.d", "wrongtype.conf"), `"tty"`, `"gpu"`} {
		if !strings.Contains(mismatch.Details, s) {
			t.Errorf("mismatch details %q lack %s", mismatch.Details, s)
		}
	}
}

func TestLoadConfsEdges(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	if confs, err := invoke.LoadConfs(root, "tty"); err != nil || len(confs) != 0 {
		t.Fatalf("missing folder: %v, %v", confs, err)
	}
	if confs, err := invoke.LoadConfs(filepath.Join(root, "nope"), "tty"); err != nil || len(confs) != 0 {
		t.Fatalf("missing conf dir: %v, %v", confs, err)
	}
	if _, err := invoke.LoadConfs(root, "../etc"); !errors.Is(err, spec.ErrMalformed) {
		t.Fatalf("invalid type: %v, want ErrMalformed", err)
	}
	writeFiles(t, root, map[string]string{"big.d/x.conf": `{"name":"` + strings.Repeat("x", spec.MaxConfigSize) + `"}`})
	if _, err := invoke.LoadConfs(root, "big"); !errors.Is(err, spec.ErrMalformed) {
		t.Fatalf("oversized drop-in: %v, want ErrMalformed", err)
	}
}

// A FIFO, a socket or a link to a device named like a drop-in is refused
// unread, naming the file: reading a FIFO blocked cditool and the bridge's
// discovery for ever. The drop-ins beside it still load, a link to a
// regular file too.
func TestLoadConfsReadsOnlyRegularFiles(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	writeFiles(t, root, map[string]string{"tty.d/a.conf": conf("tty", "a"), "real/b.conf": conf("tty", "b")})
	dir := filepath.Join(root, "tty.d")
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo.conf"), 0o644); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"null.conf": "/dev/null", "b.conf": filepath.Join(root, "real", "b.conf")} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	type loaded struct {
		confs []*invoke.Conf
		err   error
	}
	done := make(chan loaded, 1)
	go func() {
		confs, err := invoke.LoadConfs(root, "tty")
		done <- loaded{confs, err}
	}()
	var got loaded
	select {
	case got = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("LoadConfs blocked on a FIFO named fifo.conf")
	}
	if !reflect.DeepEqual(ids(got.confs), []string{"a.conf", "b.conf"}) {
		t.Errorf("loaded %v, want a.conf and the link b.conf", ids(got.confs))
	}
	if !errors.Is(got.err, invoke.ErrNotRegular) || !strings.Contains(got.err.Error(), "fifo.conf") || !strings.Contains(got.err.Error(), "null.conf") {
		t.Errorf("error %v, want ErrNotRegular naming fifo.conf and null.conf", got.err)
	}
}

func TestConfTypesAndLoadAll(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	writeFiles(t, root, map[string]string{
		"tty.d/t.conf":      conf("tty", "t"),
		"gpu.d/g2.conf":     conf("gpu", "g2"),
		"gpu.d/g1.conf":     conf("gpu", "g1"),
		"bad-type.d/x.conf": conf("tty", "x"),
		".hidden.d/":        "",
		"empty.d/":          "",
		"file.d":            "a file, not a folder",
		"vendor.yaml":       "a newer CDI spec",
		"real/c.conf":       conf("cam", "c"),
	})
	if err := os.Symlink(filepath.Join(root, "real"), filepath.Join(root, "cam.d")); err != nil {
		t.Fatal(err)
	}
	types, err := invoke.ConfTypes(root)
	if err != nil || !reflect.DeepEqual(types, []string{"cam", "empty", "gpu", "tty"}) {
		t.Fatalf("ConfTypes = %v, %v", types, err)
	}
	all, err := invoke.LoadAll(root)
	if err != nil || !reflect.DeepEqual(ids(all), []string{"c.conf", "g1.conf", "g2.conf", "t.conf"}) {
		t.Fatalf("LoadAll = %v, %v", ids(all), err)
	}
	if types, err := invoke.ConfTypes(filepath.Join(root, "nope")); err != nil || len(types) != 0 {
		t.Fatalf("ConfTypes of a missing dir = %v, %v", types, err)
	}
}

func TestFindInPath(t *testing.T) {
	t.Parallel()
	a, b := t.TempDir(), t.TempDir()
	writeFiles(t, a, map[string]string{"p/": ""})
	writeFiles(t, b, map[string]string{"p": "#!/bin/sh\n"})
	if got, err := invoke.FindInPath("p", []string{a, b}); err != nil || got != filepath.Join(b, "p") {
		t.Fatalf("FindInPath = %q, %v; want the regular file, not the directory", got, err)
	}
	for _, tc := range []struct {
		name string
		dirs []string
	}{{"", []string{b}}, {"x/p", []string{b}}, {"p", nil}, {"q", []string{a, b}}} {
		if _, err := invoke.FindInPath(tc.name, tc.dirs); !errors.Is(err, invoke.ErrNotFound) {
			t.Errorf("FindInPath(%q, %v) = %v, want ErrNotFound", tc.name, tc.dirs, err)
		}
	}
	if got := invoke.SplitPath("/a::/b:"); !reflect.DeepEqual(got, []string{"/a", "/b"}) {
		t.Errorf("SplitPath = %q", got)
	}
	if got := invoke.SplitPath(""); len(got) != 0 {
		t.Errorf("SplitPath(\"\") = %q", got)
	}
}
