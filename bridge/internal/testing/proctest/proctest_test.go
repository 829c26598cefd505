package proctest

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func TestStart(t *testing.T) {
	var cmd *exec.Cmd
	var got []byte
	t.Run("running", func(t *testing.T) {
		cmd = exec.Command("sh", "-c", "echo started >&2; exec sleep 60")
		Start(t, cmd, "sleeper", func(log []byte) { got = log })
		// Wait for the line, so that there is a log to hand over. The log
		// is in a directory of this test's t.TempDir root.
		logs := filepath.Join(filepath.Dir(t.TempDir()), "*", "sleeper.log")
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if found, _ := filepath.Glob(logs); len(found) == 1 {
				if data, _ := os.ReadFile(found[0]); len(data) > 0 {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatal("no log after 5 s")
			}
		}
	})
	if string(got) != "started\n" {
		t.Errorf("atEnd got %q, want the program's stderr", got)
	}
	if cmd.ProcessState == nil {
		t.Fatal("the program was not reaped when its test ended")
	}
	if err := cmd.Process.Signal(syscall.Signal(0)); !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("signal after the test: %v, want %v", err, os.ErrProcessDone)
	}
}
