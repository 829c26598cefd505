package main

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// image lays out, under a temporary directory, what the image carries:
// two plugins and two default drop-ins. It returns an installer from there
// to an empty host.
func image(t *testing.T) *installer {
	t.Helper()
	dir := t.TempDir()
	in := &installer{
		pluginsFrom: filepath.Join(dir, "image/opt/cdi/bin"), pluginsTo: filepath.Join(dir, "host/opt/cdi/bin"),
		dropInsFrom: filepath.Join(dir, "image/usr/share/cdi/conf.d"), dropInsTo: filepath.Join(dir, "host/etc/cdi"),
		log: io.Discard,
	}
	write(t, filepath.Join(in.pluginsFrom, "drm"), "drm v1", 0o755)
	write(t, filepath.Join(in.pluginsFrom, "endpoint"), "endpoint v1", 0o755)
	write(t, filepath.Join(in.dropInsFrom, "gpu.d/drm.conf"), "default gpu", 0o644)
	write(t, filepath.Join(in.dropInsFrom, "dev.d/generic.conf"), "default dev", 0o644)
	return in
}

func write(t *testing.T, path, data string, mode fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
}

// want checks a host file's contents and permission bits.
func want(t *testing.T, path, data string, mode fs.FileMode) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(path)
	if string(got) != data || fi.Mode().Perm() != mode {
		t.Errorf("%s: %q mode %v, want %q mode %v", path, got, fi.Mode().Perm(), data, mode)
	}
}

func run(t *testing.T, in *installer) {
	t.Helper()
	if err := in.run(); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{in.pluginsTo, filepath.Join(in.dropInsTo, "gpu.d")} {
		if tmp, _ := filepath.Glob(filepath.Join(dir, tempPrefix+"*")); len(tmp) > 0 {
			t.Errorf("temporary files left: %v", tmp)
		}
	}
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

func TestInstall(t *testing.T) {
	t.Run("fresh host", func(t *testing.T) {
		in := image(t)
		run(t, in)
		want(t, filepath.Join(in.pluginsTo, "drm"), "drm v1", 0o755)
		want(t, filepath.Join(in.pluginsTo, "endpoint"), "endpoint v1", 0o755)
		want(t, filepath.Join(in.dropInsTo, "gpu.d/drm.conf"), "default gpu", 0o644)
		want(t, filepath.Join(in.dropInsTo, "dev.d/generic.conf"), "default dev", 0o644)
		record, _ := os.ReadFile(filepath.Join(in.dropInsTo, recordName))
		if !strings.HasSuffix(string(record), "\ndev.d/generic.conf\ngpu.d/drm.conf\n") {
			t.Errorf("record:\n%s", record)
		}
	})
	t.Run("the operator's drop-ins are never overwritten", func(t *testing.T) {
		in := image(t)
		write(t, filepath.Join(in.dropInsTo, "gpu.d/drm.conf"), "mine", 0o600)
		run(t, in)
		want(t, filepath.Join(in.dropInsTo, "gpu.d/drm.conf"), "mine", 0o600)
		write(t, filepath.Join(in.dropInsTo, "dev.d/generic.conf"), "edited", 0o644)
		run(t, in)
		want(t, filepath.Join(in.dropInsTo, "dev.d/generic.conf"), "edited", 0o644)
	})
	t.Run("a removed default stays removed", func(t *testing.T) {
		in := image(t)
		run(t, in)
		removed := filepath.Join(in.dropInsTo, "dev.d/generic.conf")
		if err := os.Remove(removed); err != nil {
			t.Fatal(err)
		}
		run(t, in)
		if _, err := os.Lstat(removed); err == nil {
			t.Errorf("%s was installed again", removed)
		}
	})
	t.Run("plugins are replaced by a rename, only when they differ", func(t *testing.T) {
		in := image(t)
		run(t, in)
		drm, endpoint := filepath.Join(in.pluginsTo, "drm"), filepath.Join(in.pluginsTo, "endpoint")
		drmIno, endpointIno := inode(t, drm), inode(t, endpoint)
		write(t, filepath.Join(in.pluginsFrom, "drm"), "drm v2", 0o755)
		write(t, filepath.Join(in.pluginsTo, "mine"), "the operator's plugin", 0o755)
		run(t, in)
		want(t, drm, "drm v2", 0o755)
		want(t, filepath.Join(in.pluginsTo, "mine"), "the operator's plugin", 0o755)
		// A new inode: a running plugin's file was not written into.
		if inode(t, drm) == drmIno {
			t.Error("drm was rewritten in place")
		}
		if inode(t, endpoint) != endpointIno {
			t.Error("endpoint was replaced though it had not changed")
		}
	})
}
