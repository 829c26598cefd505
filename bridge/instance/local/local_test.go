package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/instance/storetest"
	"github.com/cdiexec/cdi/plugins/exectest"
)

func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) instance.Store {
		return New(filepath.Join(t.TempDir(), "instances.json"))
	})
}

// Two Stores on one file stand for two bridge processes: the lock must
// let exactly one of them win each race for the last slot.
func TestRaceForOneSlot(t *testing.T) {
	path := filepath.Join(t.TempDir(), "instances.json")
	stores := []*Store{New(path), New(path)}
	cam := storetest.Cam("a", "lobby", 1)
	if err := stores[0].Observe(context.Background(), "a", "cam", []instance.Instance{cam}); err != nil {
		t.Fatal(err)
	}
	slot := instance.SlotID(cam.Name, 0)
	for round := 0; round < 200; round++ {
		var wg sync.WaitGroup
		errs := make([]error, len(stores))
		for i, s := range stores {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = s.Claim(context.Background(), []instance.Claim{{Instance: cam.Name, Slot: slot, Value: "node-" + string(rune('a'+i))}})
			}()
		}
		wg.Wait()
		winners := 0
		for _, err := range errs {
			if err == nil {
				winners++
			} else if !errors.Is(err, instance.ErrSlotTaken) {
				t.Fatal(err)
			}
		}
		if winners != 1 {
			t.Fatalf("round %d: %d winners (%v)", round, winners, errs)
		}
		for i, s := range stores {
			if err := s.Release(context.Background(), []instance.Claim{{Instance: cam.Name, Slot: slot, Value: "node-" + string(rune('a'+i))}}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestOtherWriterNoticed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "instances.json")
	watcher, writer := New(path), New(path)
	watcher.PollInterval = 10 * time.Millisecond
	ch, cancel := watcher.Changes()
	defer cancel()
	if err := writer.Observe(context.Background(), "b", "cam", []instance.Instance{storetest.Cam("b", "lobby", 1)}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("a write through another Store was not noticed")
	}
}

func TestCorruptFileIsAnError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "instances.json")
	if err := os.WriteFile(path, []byte("{torn"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := New(path)
	_, err := s.List(context.Background())
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) {
		t.Fatalf("List = %v, want ErrCorrupt naming the file", err)
	}
	if err := s.Observe(context.Background(), "a", "cam", nil); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Observe = %v, want ErrCorrupt", err)
	}
	if data, _ := os.ReadFile(path); string(data) != "{torn" {
		t.Errorf("the corrupt file was overwritten with %q", data)
	}
}

// A write that the disk cannot hold fails, and leaves the file as it was
// byte for byte: no claim of the node is lost with it.
func TestFullDiskKeepsTheOldFile(t *testing.T) {
	var path string
	var before []byte
	ctx := context.Background()
	exectest.FullDisk(t, func(dir string) {
		path = filepath.Join(dir, "instances.json")
		if err := New(path).Observe(ctx, "a", "cam", []instance.Instance{storetest.Cam("a", "lobby", 1)}); err != nil {
			t.Fatal(err)
		}
		var err error
		if before, err = os.ReadFile(path); err != nil {
			t.Fatal(err)
		}
	})
	s := New(path)
	many := []instance.Instance{}
	for i := range 200 {
		many = append(many, storetest.Cam("a", "camera-with-a-long-name-"+strings.Repeat("x", 40)+strconv.Itoa(i), 4))
	}
	if err := s.Observe(ctx, "a", "cam", many); err == nil {
		t.Fatal("a write larger than the free space succeeded")
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Fatalf("the store file changed on a failed write:\n%s\nwas\n%s", after, before)
	}
	if _, err := s.List(ctx); err != nil {
		t.Fatalf("List after the failed write: %v", err)
	}
}

// A link at instances.json.lock is not followed: the store fails and the
// link's target is not created.
func TestLockLinkRefused(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "created-through-the-link")
	path := filepath.Join(dir, "instances.json")
	if err := os.Symlink(target, path+".lock"); err != nil {
		t.Fatal(err)
	}
	if err := New(path).Observe(context.Background(), "a", "cam", nil); err == nil {
		t.Error("Observe through a linked lock file succeeded")
	}
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the lock's link created its target: %v", err)
	}
}

// The file's names are lowerCamel; a file written before, with the Go
// field names, still reads.
func TestFileNames(t *testing.T) {
	path := filepath.Join(t.TempDir(), "instances.json")
	old := `{"generation": 3, "instances": {"cam-1": {"Name": "cam-1", "Config": "cam", "DeviceID": "lobby", "Shared": true,
		"Nodes": ["a"], "Capacity": 2, "Usage": {"cam-1-0": "a", "cam-1-1": ""}, "Properties": {"url": "rtsp://x"}}}}`
	if err := os.WriteFile(path, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	s := New(path)
	all, err := s.List(context.Background())
	if err != nil || len(all) != 1 {
		t.Fatalf("List = %v, %v", all, err)
	}
	in := all[0]
	if in.Config != "cam" || in.DeviceID != "lobby" || !in.Shared || in.Capacity != 2 || in.Usage["cam-1-0"] != "a" || in.Properties["url"] != "rtsp://x" {
		t.Errorf("read %+v from a file of Go field names", in)
	}
	if err := s.Observe(context.Background(), "b", "cam", []instance.Instance{storetest.Cam("b", "gate", 1)}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{`"deviceId"`, `"config"`, `"capacity"`, `"usage"`, `"nodes"`} {
		if !strings.Contains(string(data), name) {
			t.Errorf("the file written lacks %s:\n%s", name, data)
		}
	}
	if strings.Contains(string(data), `"DeviceID"`) {
		t.Errorf("the file written still has Go field names:\n%s", data)
	}
}
