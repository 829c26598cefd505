package cdispec

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/cdiexec/cdi/spec"
)

// A spec file of an ADD result's edits resolves for a runtime to the
// result's device nodes, env and mounts; a Sync of the pools leaves it.
func TestWriteFileResolves(t *testing.T) {
	dir := t.TempDir()
	d, err := Open(dir, "cdi.test")
	if err != nil {
		t.Fatal(err)
	}
	r := &spec.AddResult{DeviceNodes: []spec.DeviceNode{nullNode}, Env: map[string]string{"B": "2", "A": "1"},
		Mounts: []spec.Mount{{HostPath: dir, ContainerPath: "/data", ReadOnly: true}}}
	e := Edits(r)
	if Empty(e) || !slices.Equal(e.Env, []string{"A=1", "B=2"}) || !slices.Contains(e.Mounts[0].Options, "ro") {
		t.Fatalf("edits %+v", e)
	}
	s := &specs.Spec{Kind: "cdi.test/claim", Devices: []specs.Device{{Name: "u1-0", ContainerEdits: e}}}
	if err := d.WriteFile("cdi-bridge-claim_u1.json", s); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Sync(nil); err != nil {
		t.Fatal(err)
	}
	oci := resolve(t, dir, "cdi.test/claim=u1-0")
	if oci.Linux == nil || len(oci.Linux.Devices) != 1 || oci.Linux.Devices[0].Path != "/dev/cdi-null" ||
		!slices.Contains(oci.Process.Env, "A=1") || len(oci.Mounts) != 1 || oci.Mounts[0].Destination != "/data" {
		t.Errorf("resolved to %+v", oci)
	}
	for range 2 {
		if err := d.RemoveFile("cdi-bridge-claim_u1.json"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "cdi-bridge-claim_u1.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("file still there: %v", err)
	}
}

func TestFileNamesRefused(t *testing.T) {
	d, err := Open(t.TempDir(), "cdi.test")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"", "../x.json", "a/b.json", FilePrefix + "x.json", "x.yaml"} {
		t.Run(name, func(t *testing.T) {
			if err := d.WriteFile(name, &specs.Spec{}); !errors.Is(err, ErrFileName) {
				t.Errorf("WriteFile = %v, want ErrFileName", err)
			}
			if err := d.RemoveFile(name); !errors.Is(err, ErrFileName) {
				t.Errorf("RemoveFile = %v, want ErrFileName", err)
			}
		})
	}
}

func TestEditsOfAnOldResult(t *testing.T) {
	e := Edits(&spec.AddResult{Devices: []string{"/dev/tty9"}})
	if len(e.DeviceNodes) != 1 || e.DeviceNodes[0].Path != "/dev/tty9" || e.DeviceNodes[0].Permissions != "rw" {
		t.Errorf("edits %+v, want /dev/tty9 rw", e.DeviceNodes)
	}
	if !Empty(Edits(&spec.AddResult{})) {
		t.Error("an empty result edits something")
	}
}
