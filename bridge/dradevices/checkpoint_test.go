package dradevices

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

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
