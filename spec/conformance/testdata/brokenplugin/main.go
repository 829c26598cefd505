// Command brokenplugin is a plugin with one defect, for the tests of
// package conformance. It runs the conforming plugin generic-tty, found
// beside it, with the same environment and stdin, and passes its answer
// on spoilt in the way its own file name, broken-<defect>, says:
//
//	none                   no defect: generic-tty as it is
//	two-documents          prints every document twice
//	stdout-noise           prints a log line on stdout before the document
//	del-unknown-fails      exits 1 when DEL finds no allocation (code 5)
//	errors-exit-zero       exits 0 after an error document
//	versions-newest-first  lists its supported versions newest first
//	no-lock                changes a private copy of the state and puts it
//	                       back, so that parallel calls lose each other's
//	                       allocations, as without the state lock
//	args-ignored           drops the args members generic-tty does not
//	                       know, so that a misspelt one is ignored
//	skipped-malformed      adds a skipped_devices with a malformed reason
//	                       to every INFO result
//	skipped-unversioned    adds a well-formed skipped_devices to every INFO
//	                       result, also of versions before 0.2.0
//
// A drop-in without args.stateDir gets the directory state-<defect>
// beside the binary, so that a test can run the rules in a state of its
// own choosing rather than /var/lib/cdi. Diagnostics go to stderr.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

func main() {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "brokenplugin: %v\n", err)
		os.Exit(2)
	}
	defect := strings.TrimPrefix(filepath.Base(self), "broken-")
	stdin, _ := io.ReadAll(os.Stdin)
	stdin = withStateDir(stdin, filepath.Join(filepath.Dir(self), "state-"+defect))
	if defect == "args-ignored" {
		stdin = knownArgsOnly(stdin)
	}
	delegate := filepath.Join(filepath.Dir(self), "generic-tty")
	var stdout []byte
	var status int
	switch strings.ToUpper(os.Getenv("CDI_COMMAND")) {
	case "ADD", "DEL", "GC":
		if defect == "no-lock" {
			stdout, status = runUnlocked(delegate, stdin)
			break
		}
		fallthrough
	default:
		stdout, status = run(delegate, stdin)
	}
	stdout, status = spoil(defect, stdout, status)
	_, _ = os.Stdout.Write(stdout)
	os.Exit(status)
}

// run execs the delegate and returns its stdout and exit status; its
// stderr passes through.
func run(delegate string, stdin []byte) ([]byte, int) {
	cmd := exec.Command(delegate)
	cmd.Stdin, cmd.Stderr = bytes.NewReader(stdin), os.Stderr
	out, err := cmd.Output()
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr):
		return out, exitErr.ExitCode()
	case err != nil:
		fmt.Fprintf(os.Stderr, "brokenplugin: running %s: %v\n", delegate, err)
		return nil, 2
	}
	return out, 0
}

func spoil(defect string, stdout []byte, status int) ([]byte, int) {
	command := strings.ToUpper(os.Getenv("CDI_COMMAND"))
	code := errorCode(stdout)
	switch {
	case defect == "two-documents" && len(stdout) > 0:
		return append(stdout, stdout...), status
	case defect == "stdout-noise":
		return append([]byte("brokenplugin: starting\n"), stdout...), status
	case defect == "del-unknown-fails" && command == "DEL" && code == 5:
		return stdout, 1
	case defect == "errors-exit-zero" && code != 0:
		return stdout, 0
	case defect == "versions-newest-first" && command == "VERSION":
		return reverseVersions(stdout), status
	case defect == "skipped-malformed" && command == "INFO" && code == 0:
		return withMember(stdout, "skipped_devices", map[string]int{"Not A Reason": 1}), status
	case defect == "skipped-unversioned" && command == "INFO" && code == 0:
		return withMember(stdout, "skipped_devices", map[string]int{"not-device-node": 1}), status
	}
	return stdout, status
}

// errorCode returns the code of an error document, or 0.
func errorCode(stdout []byte) int {
	var doc struct{ Code int }
	_ = json.Unmarshal(stdout, &doc)
	return doc.Code
}

// withMember sets a member of a result document.
func withMember(stdout []byte, name string, value any) []byte {
	var doc map[string]any
	if json.Unmarshal(stdout, &doc) != nil {
		return stdout
	}
	doc[name] = value
	out, _ := json.Marshal(doc)
	return append(out, '\n')
}

func reverseVersions(stdout []byte) []byte {
	var doc map[string]any
	if json.Unmarshal(stdout, &doc) != nil {
		return stdout
	}
	if list, ok := doc["supportedVersions"].([]any); ok {
		slices.Reverse(list)
	}
	out, _ := json.Marshal(doc)
	return append(out, '\n')
}

// runUnlocked runs the delegate on a private copy of its state and then
// puts the copy back, so that every caller of a parallel burst starts from
// the same state and the last one's save wins.
func runUnlocked(delegate string, stdin []byte) ([]byte, int) {
	var conf struct {
		Type, Plugin string
		Args         map[string]any
	}
	stateDir := ""
	if json.Unmarshal(stdin, &conf) == nil {
		stateDir, _ = conf.Args["stateDir"].(string)
	}
	if stateDir == "" {
		return run(delegate, stdin)
	}
	private, err := os.MkdirTemp(stateDir, ".unlocked-")
	if err != nil {
		return run(delegate, stdin)
	}
	defer os.RemoveAll(private)
	rel := filepath.Join(conf.Type, conf.Plugin+".json")
	_ = os.Mkdir(filepath.Join(private, conf.Type), 0o700)
	_ = copyFile(filepath.Join(stateDir, rel), filepath.Join(private, rel))
	time.Sleep(50 * time.Millisecond) // all of a burst read before any saves
	var doc map[string]any
	_ = json.Unmarshal(stdin, &doc)
	doc["args"].(map[string]any)["stateDir"] = private
	privateConf, _ := json.Marshal(doc)
	stdout, status := run(delegate, privateConf)
	_ = os.MkdirAll(filepath.Join(stateDir, conf.Type), 0o700)
	_ = copyFile(filepath.Join(private, rel), filepath.Join(stateDir, rel))
	return stdout, status
}

func copyFile(from, to string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, data, 0o600)
}

// knownArgsOnly removes from a drop-in's args every member generic-tty
// does not know.
func knownArgsOnly(stdin []byte) []byte {
	var doc map[string]any
	if json.Unmarshal(stdin, &doc) != nil {
		return stdin
	}
	args, ok := doc["args"].(map[string]any)
	if !ok {
		return stdin
	}
	for k := range args {
		if !slices.Contains([]string{"root", "stateDir", "capacity", "cdiKind", "num_system_reserved"}, k) {
			delete(args, k)
		}
	}
	out, _ := json.Marshal(doc)
	return out
}

// withStateDir sets args.stateDir of a drop-in that has none.
func withStateDir(stdin []byte, dir string) []byte {
	var doc map[string]any
	if len(stdin) > 1<<20 || json.Unmarshal(stdin, &doc) != nil {
		return stdin // not a drop-in: the delegate refuses it itself
	}
	args, ok := doc["args"].(map[string]any)
	switch {
	case !ok && doc["args"] != nil:
		return stdin // args that are not an object: refused likewise
	case !ok:
		args = map[string]any{}
		doc["args"] = args
	}
	if _, set := args["stateDir"]; set {
		return stdin
	}
	args["stateDir"] = dir
	out, _ := json.Marshal(doc)
	return out
}
