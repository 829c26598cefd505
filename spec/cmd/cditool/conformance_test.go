package main

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cdiexec/cdi/plugins/exectest"
)

// TestConformance runs "cditool conformance" as a process, for each of
// its exit statuses.
func TestConformance(t *testing.T) {
	t.Parallel()
	tty := string(exectest.Conf(t, "0.1.0", "tty", "generic-tty",
		map[string]any{"root": exectest.FixtureRoot(t), "stateDir": "/nonexistent/state"}))
	tests := []struct {
		name      string
		args      []string
		stdin     string
		status    int
		stdoutHas string
		stderrHas string
	}{
		{"a conforming plugin by name", []string{"conformance", "generic-tty"}, tty, 0, "27 rules: 27 passed, 0 failed", ""},
		{"by path", []string{"conformance", filepath.Join(binDir, "generic-tty")}, tty, 0, "PASS    concurrent-add ", ""},
		{"a broken plugin", []string{"conformance", "testplugin"}, dropIn("tty", "T", "twodocs"), 1, "FAIL    stdout-one-document", ""},
		{"no plugin", []string{"conformance"}, tty, 2, "", "give one plugin"},
		{"two plugins", []string{"conformance", "a", "b"}, tty, 2, "", "give one plugin"},
		{"a drop-in flag", []string{"conformance", "--conf", "x", "generic-tty"}, tty, 2, "", "--conf does not go with conformance"},
		{"an add flag", []string{"conformance", "--numa", "0", "generic-tty"}, tty, 2, "", "--numa goes with add only"},
		{"no drop-in", []string{"conformance", "generic-tty"}, "", 2, "", "invalid drop-in"},
		{"a broken drop-in", []string{"conformance", "generic-tty"}, `{"cdiVersion":`, 2, "", "invalid drop-in"},
		{"no such plugin", []string{"conformance", "nosuch"}, tty, 3, "", "plugin not found"},
		{"no such path", []string{"conformance", "/nonexistent/plugin"}, tty, 3, "", "plugin not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(filepath.Join(binDir, "cditool"), append([]string{"--path", binDir}, tt.args...)...)
			var out, errOut bytes.Buffer
			cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(tt.stdin), &out, &errOut
			err := cmd.Run()
			var exitErr *exec.ExitError
			status := 0
			if errors.As(err, &exitErr) {
				status = exitErr.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if status != tt.status || !strings.Contains(out.String(), tt.stdoutHas) || !strings.Contains(errOut.String(), tt.stderrHas) {
				t.Fatalf("exit status %d, want %d\nstdout:\n%s\nstderr:\n%s", status, tt.status, out.String(), errOut.String())
			}
		})
	}
}
