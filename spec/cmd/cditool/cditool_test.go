package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// dropIn is a drop-in for the test plugin in the given mode.
func dropIn(typ, name, mode string) string {
	return `{"cdiVersion":"0.1.0","name":"` + name + `","type":"` + typ + `","plugin":"testplugin","args":{"mode":"` + mode + `"}}`
}

// confDir writes drop-ins (path relative to the conf dir: contents).
func confDir(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for rel, data := range files {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// cditool runs the built binary against a conf dir and the test plugin.
func cditool(t *testing.T, dir string, args ...string) (stdout, stderr string, status int) {
	t.Helper()
	args = append([]string{"--conf-dir", dir, "--path", binDir}, args...)
	cmd := exec.Command(filepath.Join(binDir, "cditool"), args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr):
		status = exitErr.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return out.String(), errOut.String(), status
}

var (
	one    = map[string]string{"tty.d/generic.conf": dropIn("tty", "TTYs", "")}
	two    = map[string]string{"tty.d/a.conf": dropIn("tty", "A", ""), "tty.d/b.conf": dropIn("tty", "B", "")}
	failB  = map[string]string{"tty.d/a.conf": dropIn("tty", "A", ""), "tty.d/b.conf": dropIn("tty", "B", "fail")}
	hangB  = map[string]string{"tty.d/a.conf": dropIn("tty", "A", ""), "tty.d/b.conf": dropIn("tty", "B", "hang")}
	broken = map[string]string{"tty.d/a.conf": dropIn("tty", "A", ""), "tty.d/b.conf": `{"cdiVersion":`}
)

func mode(m string) map[string]string {
	return map[string]string{"tty.d/generic.conf": dropIn("tty", "TTYs", m)}
}

// TestCditool runs cditool as a process for each class of exit status.
func TestCditool(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		confs     map[string]string
		args      []string
		status    int
		stdoutHas []string
		stderrHas []string
	}{
		{"info", one, []string{"info", "tty"}, 0, []string{"== tty.d/generic.conf: TTYs", "RESOURCE  SLOTS (healthy devices x capacity)", "tty       2", "CAPACITY", "tty1  tty       /dev/fake1  -     yes      0     2         yes"}, []string{"testplugin: INFO"}},
		{"info all drop-ins", two, []string{"info", "tty"}, 0, []string{"tty.d/a.conf: A", "tty.d/b.conf: B"}, nil},
		{"info one drop-in by name", two, []string{"info", "--conf", "B", "tty"}, 0, []string{"tty.d/b.conf: B"}, nil},
		{"info 0.0.1 has no inventory", one, []string{"--cdi-version", "0.0.1", "info", "tty"}, 0, []string{"tty       2"}, nil},
		{"version", one, []string{"version", "tty"}, 0, []string{"supportedVersions:  0.0.1, 0.0.2, 0.1.0, 0.2.0", "negotiated:         0.2.0"}, nil},
		{"version old plugin", mode("old"), []string{"version", "tty"}, 0, []string{"negotiated:         0.0.2"}, nil},
		{"version no common", mode("alien"), []string{"version", "tty"}, 0, []string{"negotiated:         none"}, nil},
		{"add", one, []string{"add", "tty", "pod1", "tty:2", "--numa", "0"}, 0, []string{"request-id:  pod1", "/dev/fake0   /dev/fake0      rw", "FAKE_DEVICES=tty0,tty1", "example.com/tty=tty1"}, nil},
		{"add flags before command", one, []string{"--devices", "tty0,tty1", "add", "tty", "pod1", "tty:2"}, 0, []string{"PINNED=tty0,tty1"}, nil},
		{"del", one, []string{"del", "tty", "pod1"}, 0, []string{"released request-id pod1"}, nil},
		{"del unknown is a note", one, []string{"del", "tty", "unknown"}, 0, nil, []string{"note: request-id unknown is unknown"}},
		{"list", one, []string{"list", "tty"}, 0, []string{"REQUEST-ID", "r1          tty:2    2025-01-02T03:04:05Z  /dev/fake0,/dev/fake1"}, nil},
		{"gc list", one, []string{"gc", "tty", "r1"}, 0, []string{"released 1 allocation(s): r2"}, nil},
		{"gc all", one, []string{"gc", "--all", "tty"}, 0, []string{"released 2 allocation(s): r1, r2"}, nil},
		{"broken sibling with --conf", broken, []string{"info", "--conf", "a", "tty"}, 0, []string{"tty.d/a.conf"}, []string{"warning", "b.conf"}},

		{"add plugin error", mode("fail"), []string{"add", "tty", "pod1", "tty:3"}, 1, nil, []string{"add failed: plugin error code 10 (Insufficient resources): asked for tty:3, 2 free"}},
		{"info one of two fails", failB, []string{"info", "tty"}, 1, []string{"tty.d/a.conf: A"}, []string{"tty.d/b.conf: info failed: plugin error code 101 (Plugin error): inventory unavailable"}},
		{"del state error", one, []string{"del", "tty", "broken"}, 1, nil, []string{"code 13 (State error)"}},
		{"unsupported version asked", one, []string{"--cdi-version", "0.999.0", "info", "tty"}, 1, nil, []string{"code 1 (Incompatible CDI version)"}},

		{"no command", one, nil, 2, nil, []string{"no command given", "--help"}},
		{"unknown command", one, []string{"frob", "tty"}, 2, nil, []string{`unknown command "frob"`}},
		{"unknown flag", one, []string{"--frob", "info", "tty"}, 2, nil, []string{"flag provided but not defined: -frob"}},
		{"bad timeout", one, []string{"--timeout", "0s", "info", "tty"}, 2, nil, []string{"--timeout must be positive"}},
		{"flag of another command", one, []string{"info", "tty", "--numa", "0"}, 2, nil, []string{"--numa goes with add only"}},
		{"missing arguments", one, []string{"add", "tty", "pod1"}, 2, nil, []string{"wrong number of arguments"}},
		{"bad type", one, []string{"info", "9tty"}, 2, nil, []string{"resource-type"}},
		{"no drop-ins", one, []string{"info", "gpu"}, 2, nil, []string{`no drop-ins for type "gpu"`}},
		{"no such --conf", one, []string{"info", "--conf", "nope", "tty"}, 2, nil, []string{`no drop-in "nope"`, "generic.conf"}},
		{"add needs one drop-in", two, []string{"add", "tty", "pod1", "tty:1"}, 2, nil, []string{"2 drop-ins", "choose one with --conf"}},
		{"bad request", one, []string{"add", "tty", "pod1", "tty:0"}, 2, nil, []string{`amount "0"`}},
		{"bad numa", one, []string{"add", "--numa", "x", "tty", "pod1", "tty:1"}, 2, nil, []string{"--numa"}},
		{"gc without ids", one, []string{"gc", "tty"}, 2, nil, []string{"--all"}},
		{"gc ids and all", one, []string{"gc", "tty", "r1", "--all"}, 2, nil, []string{"not both"}},
		{"broken drop-in", broken, []string{"info", "tty"}, 2, nil, []string{"b.conf", "malformed"}},
		{"type mismatch", map[string]string{"tty.d/x.conf": dropIn("gpu", "X", "")}, []string{"info", "tty"}, 2, nil, []string{"code 9", `"gpu"`, `"tty"`}},

		{"plugin not found", map[string]string{"tty.d/x.conf": strings.Replace(dropIn("tty", "X", ""), "testplugin", "missing", 1)}, []string{"info", "tty"}, 3, nil, []string{"plugin not found", `"missing"`}},
		{"garbage", mode("garbage"), []string{"info", "tty"}, 3, nil, []string{"bad output", "garbage mode: printing junk"}},
		{"timeout", hangB, []string{"--timeout", "300ms", "info", "tty"}, 3, []string{"tty.d/a.conf: A"}, []string{"timed out"}},
		{"list needs 0.1.0", mode("old"), []string{"list", "tty"}, 3, nil, []string{"incompatible plugin", "LIST needs protocol 0.1.0"}},
		{"pinning needs 0.1.0", mode("old"), []string{"add", "--devices", "tty0", "tty", "pod1", "tty:1"}, 3, nil, []string{"CDI_REQUEST_DEVICES needs protocol 0.1.0"}},
		{"worst status wins", map[string]string{"tty.d/a.conf": dropIn("tty", "A", "fail"), "tty.d/b.conf": dropIn("tty", "B", "garbage")}, []string{"info", "tty"}, 3, nil, []string{"code 101", "bad output"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			stdout, stderr, status := cditool(t, confDir(t, tt.confs), tt.args...)
			if status != tt.status {
				t.Errorf("exit status %d, want %d", status, tt.status)
			}
			for _, s := range tt.stdoutHas {
				if !strings.Contains(stdout, s) {
					t.Errorf("stdout lacks %q", s)
				}
			}
			for _, s := range tt.stderrHas {
				if !strings.Contains(stderr, s) {
					t.Errorf("stderr lacks %q", s)
				}
			}
			if tt.status != 0 && tt.stdoutHas == nil && stdout != "" {
				t.Errorf("stdout %q on failure, want nothing", stdout)
			}
			if t.Failed() {
				t.Logf("stdout:\n%s\nstderr:\n%s", stdout, stderr)
			}
		})
	}
}

// decodeAll decodes a stream of JSON documents.
func decodeAll(t *testing.T, s string) []map[string]any {
	t.Helper()
	var docs []map[string]any
	dec := json.NewDecoder(strings.NewReader(s))
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("not a JSON stream: %v\n%s", err, s)
		}
		docs = append(docs, doc)
	}
}

func TestCditoolJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		confs   map[string]string
		args    []string
		status  int
		docs    int    // on stdout
		key     string // in each stdout document
		errDocs int    // on stderr
	}{
		{"info two drop-ins", two, []string{"--json", "info", "tty"}, 0, 2, "device_inventory", 0},
		{"version", one, []string{"version", "tty", "--json"}, 0, 1, "supportedVersions", 0},
		{"add", one, []string{"--json", "add", "tty", "pod1", "tty:2"}, 0, 1, "cdiDevices", 0},
		{"list", one, []string{"--json", "list", "tty"}, 0, 1, "allocations", 0},
		{"gc", one, []string{"--json", "gc", "tty", "r1"}, 0, 1, "released", 0},
		{"del prints nothing", one, []string{"--json", "del", "tty", "pod1"}, 0, 0, "", 0},
		{"plugin error", mode("fail"), []string{"--json", "add", "tty", "pod1", "tty:3"}, 1, 0, "", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			stdout, stderr, status := cditool(t, confDir(t, tt.confs), tt.args...)
			if status != tt.status {
				t.Fatalf("exit status %d, want %d; stderr %s", status, tt.status, stderr)
			}
			docs := decodeAll(t, stdout)
			if len(docs) != tt.docs {
				t.Fatalf("%d documents on stdout, want %d:\n%s", len(docs), tt.docs, stdout)
			}
			for _, d := range docs {
				if _, ok := d[tt.key]; !ok || d["cdiVersion"] != "0.2.0" {
					t.Errorf("document lacks %q or cdiVersion 0.2.0: %v", tt.key, d)
				}
			}
			if tt.errDocs > 0 {
				// Plugin logs precede the document on stderr; it starts at "{".
				errDocs := decodeAll(t, stderr[strings.Index(stderr, "{"):])
				if len(errDocs) != tt.errDocs || errDocs[0]["code"] != float64(10) {
					t.Fatalf("stderr documents = %v, want the plugin's error document", errDocs)
				}
			}
		})
	}
}

// TestRunInProcess drives run directly, with injected output streams.
func TestRunInProcess(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args   []string
		status int
		stdout string
		stderr string
	}{
		{[]string{"--help"}, 0, "Exit status:", ""},
		{[]string{"-h"}, 0, "-conf-dir directory", ""},
		{[]string{"help"}, 0, "Usage: cditool", ""},
		{[]string{"--version"}, 0, "cditool ", ""},
		{[]string{"info"}, 2, "", "no resource-type given"},
		{[]string{"--path", ":", "info", "tty"}, 2, "", "--path is empty"},
		{[]string{"--", "--json"}, 2, "", `unknown command "--json"`},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		status := run(context.Background(), tt.args, strings.NewReader(""), &stdout, &stderr)
		if status != tt.status || !strings.Contains(stdout.String(), tt.stdout) || !strings.Contains(stderr.String(), tt.stderr) {
			t.Errorf("run(%q) = %d\nstdout %s\nstderr %s", tt.args, status, stdout.String(), stderr.String())
		}
	}
}
