package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

var modes = map[string]Options{
	"random temporary name": {Perm: 0o600},
	"fixed temporary name":  {Perm: 0o600, Temp: "p.json.tmp", NoSyncDir: true},
	"dot-file pattern":      {Perm: 0o600, Pattern: ".p-*"},
}

func TestWriteReplacesWhole(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	for name, o := range modes {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "p.json")
			o.Perm = 0o644 // wider than the umask lets through
			for _, content := range []string{"old\n", "new\n"} {
				if err := Write(path, []byte(content), o); err != nil {
					t.Fatal(err)
				}
			}
			data, _ := os.ReadFile(path)
			fi, _ := os.Stat(path)
			if string(data) != "new\n" || fi.Mode().Perm() != 0o644 {
				t.Errorf("content %q mode %v, want the new content and 0644", data, fi.Mode().Perm())
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 1 {
				t.Errorf("directory holds %d files, want the target alone", len(entries))
			}
		})
	}
}

// A failed write names the file, keeps the old content and leaves no
// temporary file behind.
func TestWriteFailureLeavesTheOldFile(t *testing.T) {
	for _, tt := range []struct {
		name  string
		setup func(t *testing.T, path string)
	}{
		{"no directory", func(t *testing.T, path string) {
			if err := os.RemoveAll(filepath.Dir(path)); err != nil {
				t.Fatal(err)
			}
		}},
		// The rename fails: a non-empty directory cannot be replaced.
		{"path is a directory", func(t *testing.T, path string) {
			if err := os.MkdirAll(filepath.Join(path, "x"), 0o755); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		for name, o := range modes {
			t.Run(tt.name+", "+name, func(t *testing.T) {
				dir := filepath.Join(t.TempDir(), "d")
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				path := filepath.Join(dir, "p.json")
				tt.setup(t, path)
				if err := Write(path, []byte("{}\n"), o); err == nil || !strings.Contains(err.Error(), path) {
					t.Fatalf("Write = %v, want an error naming %s", err, path)
				}
				if entries, _ := os.ReadDir(dir); len(entries) > 1 {
					t.Errorf("left behind: %v", entries)
				}
			})
		}
	}
}

// A link at the fixed temporary name fails the write; its target is
// neither written nor created.
func TestWriteNeverThroughALink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "shadow")
	if err := os.WriteFile(target, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "created")
	for link, to := range map[string]string{"a.tmp": target, "b.tmp": missing} {
		if err := os.Symlink(to, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
		if err := Write(filepath.Join(dir, strings.TrimSuffix(link, ".tmp")), []byte("x"), Options{Temp: link}); err == nil {
			t.Errorf("a write through the link %s succeeded", link)
		}
	}
	if data, _ := os.ReadFile(target); string(data) != "secret" {
		t.Errorf("the link's target became %q", data)
	}
	if _, err := os.Lstat(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the link's missing target was created: %v", err)
	}
}

func TestCreateTemp(t *testing.T) {
	dir := t.TempDir()
	path, err := CreateTemp(dir, ".x-*", []byte("data"), 0o640)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(path)
	if data, _ := os.ReadFile(path); string(data) != "data" || fi.Mode().Perm() != 0o640 || !strings.HasPrefix(filepath.Base(path), ".x-") {
		t.Errorf("%s: %q mode %v", path, data, fi.Mode().Perm())
	}
}

// ReadRegular reads a file, and refuses a link, a FIFO (at once, without
// blocking), a directory and a file over the limit.
func TestReadRegular(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, []byte("12345"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(file, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		limit int64
		want  error // nil: read "12345"
	}{
		{"f", 5, nil},
		{"f", 4, errTooLarge},
		{"link", 5, syscall.ELOOP},
		{"fifo", 5, ErrNotRegular},
		{".", 5, ErrNotRegular},
		{"absent", 5, fs.ErrNotExist},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := ReadRegular(filepath.Join(dir, tc.name), tc.limit)
			switch {
			case tc.want == nil && (err != nil || string(data) != "12345"):
				t.Errorf("ReadRegular = %q, %v", data, err)
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Errorf("ReadRegular: %v, want %v", err, tc.want)
			}
		})
	}
}
