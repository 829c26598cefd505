package disk_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cdiexec/cdi/plugins/exectest"
	"github.com/cdiexec/cdi/plugins/internal/store"
	"github.com/cdiexec/cdi/plugins/internal/store/disk"
)

// secret stands for a root-owned file someone would like overwritten.
const secret = "root:secret\n"

func secretFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "shadow")
	if err := os.WriteFile(path, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// checkSecret fails the test if the file's content or mode changed.
func checkSecret(t *testing.T, path string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if data := readFile(t, path); string(data) != secret || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the link's target became %q, mode %v", data, fi.Mode().Perm())
	}
}

// A loop re-creating <state>.tmp as a link to another file, racing
// hundreds of saves, never gets that file written or its mode changed:
// before the fix the file was overwritten and made 0644 within a few
// hundred saves.
func TestTempLinkRaceWritesNothingThrough(t *testing.T) {
	target := secretFile(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "p.json")
	s := disk.New(path, bootA)
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			_ = os.Remove(path + ".tmp")
			_ = os.Symlink(target, path+".tmp")
		}
	}()
	saved := 0
	for range 500 {
		if s.Update(t.Context(), increment) == nil {
			saved++
		}
	}
	stop.Store(true)
	wg.Wait()
	checkSecret(t, target)
	t.Logf("%d of 500 saves went through while the link was re-created; the others failed", saved)
}

// A link at the lock's or the state's path is not followed: the call
// fails and the target is neither written nor, if missing, created.
func TestLinksAtLockAndStateRefused(t *testing.T) {
	for _, suffix := range []string{".lock", ""} {
		t.Run("link at p.json"+suffix, func(t *testing.T) {
			target := secretFile(t)
			path := filepath.Join(t.TempDir(), "p.json")
			if err := os.Symlink(target, path+suffix); err != nil {
				t.Fatal(err)
			}
			err := disk.New(path, bootA).Update(t.Context(), increment)
			if err == nil || (suffix == "" && !errors.Is(err, store.ErrCorrupt)) || (suffix == ".lock" && !errors.Is(err, syscall.ELOOP)) {
				t.Fatalf("Update = %v, want it refused (ELOOP for the lock, a state error wrapping ErrCorrupt for the state file)", err)
			}
			checkSecret(t, target)
		})
	}
	missing := filepath.Join(t.TempDir(), "created-through-the-link")
	path := filepath.Join(t.TempDir(), "p.json")
	if err := os.Symlink(missing, path+".lock"); err != nil {
		t.Fatal(err)
	}
	_ = disk.New(path, bootA).Update(t.Context(), increment)
	if _, err := os.Lstat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the lock's link created its target: %v", err)
	}
}

// A state directory that is a link, dangling or not, or that others may
// write to, is refused with ErrUnsafeDir and a message that says why.
func TestUnsafeStateDirRefused(t *testing.T) {
	real := t.TempDir()
	linked := filepath.Join(t.TempDir(), "linked")
	if err := os.Symlink(real, linked); err != nil {
		t.Fatal(err)
	}
	dangling := filepath.Join(t.TempDir(), "dangling")
	if err := os.Symlink(filepath.Join(real, "gone"), dangling); err != nil {
		t.Fatal(err)
	}
	open := t.TempDir()
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	for name, dir := range map[string]string{"a link": linked, "a dangling link": dangling, "world-writable": open} {
		t.Run(name, func(t *testing.T) {
			err := disk.New(filepath.Join(dir, "p.json"), bootA).Update(t.Context(), increment)
			if !errors.Is(err, disk.ErrUnsafeDir) {
				t.Fatalf("Update = %v, want ErrUnsafeDir", err)
			}
		})
	}
	made := filepath.Join(t.TempDir(), "new", "tty", "p.json")
	update(t, disk.New(made, bootA), increment)
	if fi, err := os.Stat(filepath.Dir(made)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("a new state directory has mode %v (%v), want 0700", fi.Mode().Perm(), err)
	}
}

// A state file over MaxStateSize is refused, unparsed: a file of 200,000
// allocations made every call take seconds and hundreds of megabytes.
func TestOversizedStateRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.json")
	big := make([]byte, disk.MaxStateSize+1)
	for i := range big {
		big[i] = ' '
	}
	copy(big, `{"format":1,"bootID":"boot-a","allocations":{}}`)
	if err := os.WriteFile(path, big, 0o644); err != nil {
		t.Fatal(err)
	}
	err := disk.New(path, bootA).Update(t.Context(), increment)
	if !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("Update = %v, want ErrCorrupt for the size", err)
	}
}

// A FIFO or a directory at the state file's path is refused as corrupt at
// once: opening a FIFO to read it would wait for a writer for good.
func TestStatePathNotARegularFile(t *testing.T) {
	for name, place := range map[string]func(string) error{
		"fifo":      func(p string) error { return syscall.Mkfifo(p, 0o644) },
		"directory": func(p string) error { return os.Mkdir(p, 0o755) },
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "p.json")
			if err := place(path); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- disk.New(path, bootA).Update(t.Context(), increment) }()
			select {
			case err := <-done:
				if !errors.Is(err, store.ErrCorrupt) {
					t.Fatalf("Update = %v, want ErrCorrupt", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Update still waits on the state file after 10s")
			}
		})
	}
}

// A save the disk cannot hold fails, and the state file keeps its old
// content byte for byte; no temporary file is left behind.
func TestFullDiskKeepsTheOldState(t *testing.T) {
	var path string
	var before []byte
	exectest.FullDisk(t, func(dir string) {
		path = filepath.Join(dir, "tty", "p.json")
		update(t, disk.New(path, bootA), increment)
		before = readFile(t, path)
	})
	big := func(st *store.State) error {
		for i := range 500 {
			st.Allocations[fmt.Sprintf("r-%d", i)] = record(fmt.Sprintf("dev-%d", i))
		}
		return nil
	}
	if err := disk.New(path, bootA).Update(t.Context(), big); err == nil {
		t.Fatal("a save larger than the free space succeeded")
	}
	if after := readFile(t, path); string(after) != string(before) {
		t.Fatalf("the state changed on a failed save:\n%s\nwas\n%s", after, before)
	}
	if _, err := os.Lstat(path + ".tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the temporary file is left: %v", err)
	}
}
