package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"io"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestImage builds the image twice and inspects the tarball the way a
// runtime would read it.
func TestImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every binary")
	}
	dir := t.TempDir()
	o := options{out: filepath.Join(dir, "a.tar"), tag: "example.com/cdi-bridge:test", arch: runtime.GOARCH, repo: "../../.."}
	first, err := build(o, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	o.out = filepath.Join(dir, "b.tar")
	second, err := build(o, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if first != second {
		t.Errorf("two builds of the same sources: digests %s and %s", first, second)
	}
	tag, _ := name.NewTag(o.tag)
	img, err := tarball.ImageFromPath(o.out, &tag)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH || !slices.Equal(cf.Config.Entrypoint, []string{"/usr/local/bin/cdi-bridge"}) {
		t.Errorf("config: os %s arch %s entrypoint %v", cf.OS, cf.Architecture, cf.Config.Entrypoint)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %d, %v; want one on an empty base", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	checkLayer(t, rc)
}

// checkLayer wants every binary static and executable, and the drop-ins.
func checkLayer(t *testing.T, r io.Reader) {
	want := map[string]bool{
		"usr/local/bin/cdi-bridge": true, "usr/local/bin/cditool": true, "usr/local/bin/cdi-install": true,
		"opt/cdi/bin/drm": true, "opt/cdi/bin/generic": true, "opt/cdi/bin/generic-tty": true, "opt/cdi/bin/endpoint": true,
		"usr/share/cdi/conf.d/gpu.d/drm.conf": false, "usr/share/cdi/conf.d/tty.d/generic.conf": false,
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		binary, ok := want[h.Name]
		if !ok {
			continue
		}
		delete(want, h.Name)
		if h.Uid != 0 || h.Gid != 0 || h.ModTime.Unix() != 0 {
			t.Errorf("%s: owner %d:%d, time %v; want root and the epoch", h.Name, h.Uid, h.Gid, h.ModTime)
		}
		if !binary {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if h.Mode&0o111 == 0 || !static(t, h.Name, data) {
			t.Errorf("%s: mode %o; want an executable static binary", h.Name, h.Mode)
		}
	}
	for n := range want {
		t.Errorf("%s missing from the image", n)
	}
}

// static reports whether an ELF binary needs no dynamic loader: the image
// has no libc.
func static(t *testing.T, name string, data []byte) bool {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		t.Errorf("%s: %v", name, err)
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	return true
}
