package exectest

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// FullDisk mounts a 64 KiB tmpfs for the test and fills it to the last few
// hundred bytes, so that the next write of any size fails with ENOSPC,
// and returns it; files to keep must be written before, with write. It
// skips the test where mounting is not allowed (it needs root).
func FullDisk(t testing.TB, write func(dir string)) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v): the full-disk case needs root", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	write(dir)
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 512)
	for {
		if _, err := f.Write(chunk); err != nil {
			return dir // full
		}
	}
}
