// Package proctest runs a program for the length of a test, its stderr in
// a log file that the test's output shows when the test fails.
package proctest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Start starts cmd with its stderr in <t.TempDir()>/<name>.log. When the
// test ends it kills and reaps cmd, hands the whole log to atEnd (if not
// nil), and logs it if the test has failed.
func Start(t testing.TB, cmd *exec.Cmd, name string, atEnd func(log []byte)) {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logFile.Close()
		data, _ := os.ReadFile(logPath)
		if atEnd != nil {
			atEnd(data)
		}
		if t.Failed() {
			t.Logf("%s's log:\n%s", name, data)
		}
	})
}
