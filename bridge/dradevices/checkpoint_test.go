package dradevices

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cdiexec/cdi/spec"
)

func TestCheckpointSurvivesReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "claims.json")
	c, err := LoadCheckpoint(path)
	if err != nil || len(c.UIDs()) != 0 {
		t.Fatalf("missing file: %v, %v; want an empty checkpoint", c.UIDs(), err)
	}
	rec := Claim{Namespace: "ns", Name: "c", Devices: []PreparedDevice{
		{Pool: "tty-generic", ID: "tty13", RequestID: "u1-0", Result: &spec.AddResult{Devices: []string{"/dev/tty13"}}},
	}}
	if err := c.Put("u1", rec); err != nil {
		t.Fatal(err)
	}
	if err := c.Put("u2", Claim{Devices: []PreparedDevice{{RequestID: "u2-0"}}}); err != nil {
		t.Fatal(err)
	}
	again, err := LoadCheckpoint(path)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := again.Get("u1")
	if !ok || !got.Prepared() || got.Devices[0].Result.Devices[0] != "/dev/tty13" {
		t.Errorf("reloaded u1 = %+v, %v", got, ok)
	}
	if u2, _ := again.Get("u2"); u2.Prepared() {
		t.Error("a device without an ADD result counts as prepared")
	}
	if err := again.Delete("u1"); err != nil {
		t.Fatal(err)
	}
	third, err := LoadCheckpoint(path)
	if err != nil || len(third.UIDs()) != 1 || third.UIDs()[0] != "u2" {
		t.Errorf("after Delete: %v, %v; want u2 only", third.UIDs(), err)
	}
}

func TestCheckpointUnreadable(t *testing.T) {
	for name, content := range map[string]string{
		"not json":      "{",
		"wrong version": `{"version":7,"claims":{}}`,
		"wrong shape":   `{"version":1,"claims":[]}`,
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "claims.json")
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := LoadCheckpoint(path); !errors.Is(err, ErrCheckpoint) {
				t.Errorf("LoadCheckpoint = %v, want ErrCheckpoint", err)
			}
		})
	}
	t.Run("a directory", func(t *testing.T) {
		if _, err := LoadCheckpoint(t.TempDir()); !errors.Is(err, ErrCheckpoint) {
			t.Errorf("LoadCheckpoint = %v, want ErrCheckpoint", err)
		}
	})
	// Neither blocks the bridge's start nor reads another file's claims.
	for name, place := range map[string]func(path string) error{
		"a FIFO": func(path string) error { return syscall.Mkfifo(path, 0o600) },
		"a link to a checkpoint": func(path string) error {
			target := path + ".real"
			if err := os.WriteFile(target, []byte(`{"version":1,"claims":{}}`), 0o600); err != nil {
				return err
			}
			return os.Symlink(target, path)
		},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "claims.json")
			if err := place(path); err != nil {
				t.Fatal(err)
			}
			if _, err := LoadCheckpoint(path); !errors.Is(err, ErrCheckpoint) {
				t.Errorf("LoadCheckpoint = %v, want ErrCheckpoint", err)
			}
		})
	}
}

// A checkpoint that cannot be read, or that another boot wrote, does not
// stop the bridge: it is moved aside, kept for the operator, and the
// checkpoint starts empty, recording this boot.
func TestOpenCheckpointSetsAside(t *testing.T) {
	now := time.Date(2026, 11, 3, 4, 5, 6, 0, time.UTC)
	good := `{"version":1,"bootId":"this-boot","claims":{"u1":{"namespace":"ns","name":"c","devices":[]}}}`
	for name, tc := range map[string]struct {
		place  func(path string) error
		reason string // "" for a file kept
	}{
		"truncated":     {writing(`{"version":1,"claims":{"u1":{"na`), ReasonUnreadable},
		"wrong types":   {writing(`{"version":"1","claims":{}}`), ReasonUnreadable},
		"empty":         {writing(""), ReasonUnreadable},
		"a FIFO":        {func(path string) error { return syscall.Mkfifo(path, 0o600) }, ReasonUnreadable},
		"a link":        {func(path string) error { return os.Symlink("/etc/hostname", path) }, ReasonUnreadable},
		"too large":     {func(path string) error { return errors.Join(writing("{")(path), os.Truncate(path, maxCheckpoint+1)) }, ReasonUnreadable},
		"another boot":  {writing(strings.Replace(good, "this-boot", "an-earlier-boot", 1)), ReasonPreviousBoot},
		"this boot":     {writing(good), ""},
		"no boot known": {writing(strings.Replace(good, `"bootId":"this-boot",`, "", 1)), ""},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "claims.json")
			if err := tc.place(path); err != nil {
				t.Fatal(err)
			}
			before, _ := os.Lstat(path)
			c, aside, err := OpenCheckpoint(path, "this-boot", now)
			if err != nil {
				t.Fatal(err)
			}
			if tc.reason == "" {
				if aside != nil || len(c.UIDs()) != 1 {
					t.Errorf("set aside %+v, claims %v; want the file's claim kept", aside, c.UIDs())
				}
			} else {
				after, lerr := os.Lstat(aside.Path)
				if aside.Reason != tc.reason || lerr != nil || !os.SameFile(before, after) || len(c.UIDs()) != 0 {
					t.Errorf("set aside %+v (%v), claims %v; want the file moved aside for %s, no claim", aside, lerr, c.UIDs(), tc.reason)
				}
				if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("the file is still at %s: %v", path, err)
				}
			}
			if err := c.Put("u2", Claim{}); err != nil {
				t.Fatal(err)
			}
			if again, err := LoadCheckpoint(path); err != nil || again.BootID() != "this-boot" {
				t.Errorf("written again: boot %q, %v; want this boot recorded", again.BootID(), err)
			}
		})
	}
	t.Run("a file that cannot be moved aside", func(t *testing.T) {
		if _, _, err := OpenCheckpoint("/", "this-boot", now); !errors.Is(err, ErrCheckpoint) {
			t.Errorf("OpenCheckpoint(/) = %v, want ErrCheckpoint", err)
		}
	})
}

func writing(content string) func(path string) error {
	return func(path string) error { return os.WriteFile(path, []byte(content), 0o600) }
}
