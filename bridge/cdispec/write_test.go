package cdispec

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/cdiexec/cdi/plugins/exectest"
	"github.com/cdiexec/cdi/spec"
)

// Open removes the staging directories of its vendor that a killed write
// left (untouched for debrisAge), and nothing else: not another vendor's,
// not a file or a link named like one of its own, not another producer's
// temporary file, not one of a write under way.
func TestOpenRemovesDebris(t *testing.T) {
	dir, elsewhere := t.TempDir(), t.TempDir()
	d := &Dir{path: dir, vendor: "cdi.test"}
	other := &Dir{path: dir, vendor: "cdi.test-other"}
	ours, live := filepath.Join(dir, d.stagingPrefix()+"123"), filepath.Join(dir, d.stagingPrefix()+"789")
	killed := time.Now().Add(-debrisAge - time.Second)
	for _, p := range []string{ours, live, filepath.Join(dir, other.stagingPrefix()+"456")} {
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "spec.1.tmp"), []byte("{"), 0o644); err != nil {
			t.Fatal(err)
		}
		if p != live {
			if err := os.Chtimes(p, killed, killed); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name, data := range map[string]string{"spec.2.tmp": "{", d.stagingPrefix() + "file": "", "keep": "x"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(elsewhere, "keep"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, filepath.Join(dir, d.stagingPrefix()+"link")); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, "cdi.test"); err != nil {
		t.Fatal(err)
	}
	want := []string{other.stagingPrefix() + "456", d.stagingPrefix() + "789", d.stagingPrefix() + "file", d.stagingPrefix() + "link", "keep",
		"spec.2.tmp"}
	if names := list(t, dir); !slices.Equal(names, sorted(want)) {
		t.Errorf("after Open: %v, want %v", names, want)
	}
	if _, err := os.Stat(filepath.Join(elsewhere, "keep")); err != nil {
		t.Errorf("the link's target: %v", err)
	}
}

// On a full disk a write fails with ENOSPC, the same text each time (the
// node logs a failure once per distinct text), and leaves nothing.
func TestWriteOnAFullDisk(t *testing.T) {
	dir := exectest.FullDisk(t, func(string) {})
	d, err := Open(dir, "cdi.test")
	if err != nil {
		t.Fatal(err)
	}
	kind := Kind{Vendor: "cdi.test", Class: "tty", Devices: []Device{{Name: "tty1", Nodes: []spec.DeviceNode{nullNode}}}}
	var texts []string
	for range 3 {
		_, err := d.Sync([]Kind{kind})
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("Sync on a full disk: %v, want ENOSPC", err)
		}
		texts = append(texts, err.Error())
	}
	if len(slices.Compact(slices.Clone(texts))) != 1 {
		t.Errorf("the same failure reads differently: %q", texts)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 || entries[0].Name() != "filler" {
		t.Errorf("the full directory holds %v, want the filler alone", entries)
	}
}

// Another process's Open (the new pod of a rolling update) never removes
// the staging directory of a write under way (the old pod's claim spec,
// after its ADDs succeeded): only one no write has touched for
// debrisAge, a killed writer's.
func TestOpenLeavesAWriteUnderWay(t *testing.T) {
	dir := t.TempDir()
	writer, err := Open(dir, "cdi.test")
	if err != nil {
		t.Fatal(err)
	}
	s := &specs.Spec{Kind: "cdi.test/claim", Devices: []specs.Device{{Name: "u-0",
		ContainerEdits: specs.ContainerEdits{Env: []string{"A=1"}}}}}
	done := make(chan struct{})
	failed := make(chan error, 1)
	go func() {
		defer close(done)
		for i := range 300 {
			if err := writer.WriteFile(fmt.Sprintf("cdi-bridge-claim_u%d.json", i), s); err != nil {
				failed <- err
				return
			}
		}
	}()
	opens := 0
	for running := true; running; opens++ {
		select {
		case <-done:
			running = false
		default:
		}
		if _, err := Open(dir, "cdi.test"); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-failed:
		t.Errorf("a write failed while %d Opens ran beside it: %v", opens, err)
	default:
	}
}

// What a killed write left after Open had looked (too young then) goes
// at a later Sync, once untouched for debrisAge.
func TestSyncRemovesDebris(t *testing.T) {
	dir := t.TempDir()
	d, err := Open(dir, "cdi.test")
	if err != nil {
		t.Fatal(err)
	}
	killed := filepath.Join(dir, d.stagingPrefix()+"123")
	if err := os.Mkdir(killed, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Sync(nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(killed); err != nil {
		t.Fatalf("a fresh staging directory after Sync: %v, want it kept", err)
	}
	long := time.Now().Add(-debrisAge)
	if err := os.Chtimes(killed, long, long); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Sync(nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(killed); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a staging directory untouched for %v after Sync: %v, want it gone", debrisAge, err)
	}
}

// A kind Keep holds is written, and Sync, which does not name it, leaves
// it; once no Keep holds it, the next Sync removes it.
func TestKeepOutlivesSync(t *testing.T) {
	dir := t.TempDir()
	d, err := Open(dir, "cdi.test")
	if err != nil {
		t.Fatal(err)
	}
	moved := Kind{Vendor: "cdi.test", Class: "tty", Devices: []Device{{Name: "tty1", Nodes: []spec.DeviceNode{nullNode}}}}
	served := Kind{Vendor: "cdi.test", Class: "gpu", Devices: []Device{{Name: "card0", Nodes: []spec.DeviceNode{nullNode}}}}
	if err := d.Keep([]Kind{moved}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Sync([]Kind{served}); err != nil {
		t.Fatal(err)
	}
	if names := list(t, dir); !slices.Equal(names, sorted([]string{FileName(served), FileName(moved)})) {
		t.Fatalf("with tty kept, after Sync: %v", names)
	}
	if err := d.Keep(nil); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Sync([]Kind{served}); err != nil {
		t.Fatal(err)
	}
	if names := list(t, dir); !slices.Equal(names, []string{FileName(served)}) {
		t.Errorf("with nothing kept, after Sync: %v", names)
	}
}
