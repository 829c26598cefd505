package exectest

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// MustRun reports whether a test whose prerequisite this machine lacks (a
// program, root) must fail rather than skip: when the CI environment
// variable is set, unless the tests run with -short, the quick run (make
// test-short) that needs nothing but Go and skips the rest wherever it
// runs. Outside a test binary, the CI variable alone decides.
func MustRun() bool {
	return os.Getenv("CI") != "" && !(testing.Testing() && testing.Short())
}

// FullDisk mounts a 64 KiB tmpfs for the test and fills it to the last few
// hundred bytes, so that the next write of any size fails with ENOSPC,
// and returns it; files to keep must be written before, with write.
// Mounting needs root: without it the test is skipped, or failed where
// MustRun.
func FullDisk(t testing.TB, write func(dir string)) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
		if MustRun() {
			t.Fatalf("cannot mount a tmpfs here (%v): the full-disk case needs root, and the CI environment variable is set", err)
		}
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
