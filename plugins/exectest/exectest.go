// Package exectest runs plugin binaries in tests the way a runtime does:
// built once with the go tool as they ship (internal/gobuild), exec'd
// with only the protocol's environment variables and a configuration on
// stdin, their single JSON document decoded from stdout.
package exectest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/cdiexec/cdi/internal/gobuild"
)

// Build compiles the main package pkg (an import path or ./dir relative to
// the caller's package) into dir, as `make build` compiles what ships
// (internal/gobuild), and returns the binary's path. It is meant for
// TestMain, which has no *testing.T.
func Build(pkg, dir string) (string, error) {
	name := filepath.Base(pkg)
	if pkg == "." || pkg == "./" {
		// "." has no name of its own; use the package directory's.
		wd, err := os.Getwd()
		if err != nil {
			return "", err
		}
		name = filepath.Base(wd)
	}
	out := filepath.Join(dir, name)
	cmd := gobuild.Command(context.Background(), "", out, pkg)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, msg)
	}
	return out, nil
}

// Result is what one plugin run produced.
type Result struct {
	Status int
	Stdout []byte
	Stderr []byte
	// Doc is stdout decoded as one JSON object; nil when stdout is empty.
	Doc map[string]any
}

// Code returns the error code in Doc, or 0 when there is none.
func (r Result) Code() int {
	c, _ := r.Doc["code"].(float64)
	return int(c)
}

// Decode unmarshals stdout into v.
func (r Result) Decode(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Stdout, v); err != nil {
		t.Fatalf("decoding stdout %q: %v", r.Stdout, err)
	}
}

// Run execs bin with exactly env (plus nothing inherited) and stdin, and
// fails the test unless stdout is empty or exactly one JSON object.
func Run(t testing.TB, bin string, env map[string]string, stdin []byte) Result {
	t.Helper()
	r, err := RunE(context.Background(), bin, env, stdin)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// RunE is Run without a testing.TB, for helper goroutines and benchmarks.
func RunE(ctx context.Context, bin string, env map[string]string, stdin []byte) (Result, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = []string{}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(stdin), &stdout, &stderr
	err := cmd.Run()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		return Result{}, fmt.Errorf("running %s: %w", bin, err)
	}
	r := Result{Status: cmd.ProcessState.ExitCode(), Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}
	if stdout.Len() == 0 {
		return r, nil
	}
	dec := json.NewDecoder(bytes.NewReader(r.Stdout))
	if err := dec.Decode(&r.Doc); err != nil || dec.More() {
		return r, fmt.Errorf("%s: stdout is not exactly one JSON object: %q (stderr %q)", bin, r.Stdout, r.Stderr)
	}
	return r, nil
}

// Conf returns a configuration document with the given fields and args.
func Conf(t testing.TB, version, typ, plugin string, args map[string]any) []byte {
	t.Helper()
	doc := map[string]any{"cdiVersion": version, "name": "test " + plugin, "type": typ, "plugin": plugin}
	if args != nil {
		doc["args"] = args
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Env builds a protocol environment from alternating names and values.
func Env(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// Main builds the plugin package pkg into a temporary directory, stores
// the binary's path in *bin, runs the tests and removes the directory.
// Call it from TestMain: os.Exit happens here.
func Main(m *testing.M, pkg string, bin *string) {
	MainWith(m, func(dir string) (err error) {
		*bin, err = Build(pkg, dir)
		return err
	})
}

// MainDir is Main for tests that need several plugins side by side, as in
// a plugin search path: every package in pkgs is built into one
// temporary directory, whose path is stored in *dir.
func MainDir(m *testing.M, dir *string, pkgs ...string) {
	MainWith(m, func(d string) error {
		*dir = d
		for _, pkg := range pkgs {
			if _, err := Build(pkg, d); err != nil {
				return err
			}
		}
		return nil
	})
}

// MainWith is Main for tests that build what they need themselves: build
// fills a new temporary directory, then the tests run and the directory
// is removed. A failed build ends the test binary with status 2.
func MainWith(m *testing.M, build func(dir string) error) {
	os.Exit(runMain(m, build))
}

func runMain(m *testing.M, build func(dir string) error) int {
	dir, err := os.MkdirTemp("", "plugin-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer os.RemoveAll(dir)
	if err := build(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	return m.Run()
}

// StateDir returns a new directory for plugins' state, for a test whose
// plugins a bridge runs. It is removed at cleanup like t.TempDir's, but
// tries again for up to 5 s until it stays gone: a bridge runs each
// plugin in a process group of its own, so a plugin run it had just
// started can outlive the killed bridge and recreate its lock file while
// the directory is being removed.
func StateDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "plugin-state")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		var err error
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
			err = os.RemoveAll(dir)
			// Gone for good only if no late plugin recreates it meanwhile.
			time.Sleep(50 * time.Millisecond)
			if _, statErr := os.Stat(dir); err == nil && errors.Is(statErr, fs.ErrNotExist) {
				return
			}
		}
		t.Errorf("removing the plugin state %s: %v", dir, err)
	})
	return dir
}

// FixtureRoot returns the absolute path of the module's testdata/root,
// so that a test at any depth can point a plugin's root at the fixture.
func FixtureRoot(t testing.TB) string {
	t.Helper()
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "testdata", "root")
}

// ModuleRoot returns the directory of the nearest go.mod at or above the
// working directory: the module's root for a test in any of its packages,
// and for a program run from the module with go run.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod at or above the working directory")
		}
		dir = parent
	}
}

// ShippedDropIn is conf.d's drop-in rel (e.g. "tty.d/generic.conf") as a
// document whose plugin runs here: its state in stateDir, and its root,
// where it has one, at the fixture host.
func ShippedDropIn(t testing.TB, rel, stateDir string) map[string]any {
	t.Helper()
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "conf.d", rel))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("conf.d/%s: %v", rel, err)
	}
	args, ok := doc["args"].(map[string]any)
	if !ok {
		t.Fatalf("conf.d/%s has no args", rel)
	}
	if root, ok := args["root"]; ok {
		if root != "/" {
			t.Fatalf("conf.d/%s: root %v; a shipped drop-in serves the host's /", rel, root)
		}
		args["root"] = FixtureRoot(t)
	}
	args["stateDir"] = stateDir
	return doc
}

// Marshal is doc as JSON, for a plugin's stdin.
func Marshal(t testing.TB, doc any) []byte {
	t.Helper()
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
