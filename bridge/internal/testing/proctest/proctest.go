// Package proctest runs a program for the length of a test, its stderr in
// a log file that the test's output shows when the test fails, and reads
// a process's CPU time for the benchmarks.
package proctest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
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

// userHZ is the unit of /proc/<pid>/stat's times, 100 on every Linux
// that Go runs on.
const userHZ = 100

// CPU is the CPU time process pid has used so far, user and system: the
// 14th and 15th fields of /proc/<pid>/stat, counted after the command's
// closing parenthesis, since the command may contain spaces.
func CPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("process CPU time: %w", err)
	}
	_, rest, ok := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, b)
	}
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}
