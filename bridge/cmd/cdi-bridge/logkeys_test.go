package main

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cdiexec/cdi/bridge/internal/testing/kubelettest"
	"github.com/cdiexec/cdi/spec/jsonread"
)

// Every line of the bridge's log is one JSON object whose keys are its
// own: an attribute named like one of slog's (time, level, msg, source),
// or given twice in one call, makes a second key of that name, which jq
// and log collectors read in place of the first. The Allocate line once
// carried "level":"configuration" after slog's "level":"INFO", so that
// `select(.level != "INFO")` matched every Allocate.
func TestLogKeysAreUnique(t *testing.T) {
	b := startBridge(t)
	ctx := t.Context()
	// Both levels of Allocate, one terminal each, and a denial.
	res := instanceResource(t, b.kubelet)
	devs, err := b.kubelet.WaitFor(res, wait, func(_ int, d []*pluginapi.Device) bool { return len(d) > 0 })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.kubelet.Allocate(ctx, res, []string{devs[0].ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.kubelet.Allocate(ctx, pool, []string{"0"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.kubelet.Allocate(ctx, pool, []string{"1", "2", "3"}); err == nil {
		t.Fatal("three distinct terminals out of two were granted")
	}
	// A drop-in that does not load, for the WARN of discovery.
	if err := os.WriteFile(filepath.Join(b.confDir, "tty.d", "broken.conf"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(wait); len(b.log.records("some drop-ins do not load")) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the broken drop-in was not logged")
		}
	}
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := b.cmd.Wait(); err != nil {
		t.Fatalf("cdi-bridge exited with %v", err)
	}
	lines := b.log.rawLines()
	for i, line := range lines {
		if err := uniqueKeys(line); err != nil {
			t.Errorf("log line %d: %v:\n%s", i+1, err, line)
		}
		if sev := gjson.GetBytes(line, "level").String(); !strings.Contains(" DEBUG INFO WARN ERROR ", " "+sev+" ") {
			t.Errorf("log line %d: level %q is not a severity:\n%s", i+1, sev, line)
		}
	}
	var levels []string
	for _, r := range b.log.records("allocated") {
		levels = append(levels, fmt.Sprint(r["resourceLevel"]))
	}
	if strings.Join(levels, " ") != "instance configuration" {
		t.Errorf("allocated lines' resourceLevel: %v, want instance, then configuration", levels)
	}
	if len(lines) < 10 {
		t.Errorf("only %d log lines: the run logged less than it should have", len(lines))
	}
}

// instanceResource returns an Instance-level resource the kubelet fake
// has a registration of: any of the domain's but the pool's.
func instanceResource(t *testing.T, k *kubelettest.Kubelet) string {
	t.Helper()
	for _, r := range k.Registrations() {
		if r.ResourceName != pool && strings.HasPrefix(r.ResourceName, "cdi.test/") {
			return r.ResourceName
		}
	}
	t.Fatalf("no Instance-level registration among %d", len(k.Registrations()))
	return ""
}

// uniqueKeys is nil when doc is one JSON document in which no object, at
// any depth, gives a key twice.
func uniqueKeys(doc []byte) error {
	v, err := jsonread.Parse(doc)
	if err != nil {
		return err
	}
	return uniqueIn(v)
}

func uniqueIn(v gjson.Result) error {
	if v.IsObject() {
		// jsonread refuses a map key given twice.
		var m map[string]json.RawMessage
		if err := jsonread.Read(v, &m); err != nil {
			return err
		}
	}
	if !v.IsObject() && !v.IsArray() {
		return nil
	}
	var err error
	v.ForEach(func(_, e gjson.Result) bool {
		err = uniqueIn(e)
		return err == nil
	})
	return err
}

func TestUniqueKeys(t *testing.T) {
	for doc, unique := range map[string]bool{
		`{"level":"INFO","msg":"m","a":[1,{"b":2,"c":3}]}`: true,
		`[{"a":1},{"a":1}]`:                             true,
		`{"level":"INFO","msg":"m","level":"instance"}`: false,
		`{"a":{"b":1,"b":2}}`:                           false,
		`{"a":[{"b":1,"b":2}]}`:                         false,
	} {
		if err := uniqueKeys([]byte(doc)); (err == nil) != unique {
			t.Errorf("uniqueKeys(%s) = %v, want unique %v", doc, err, unique)
		}
	}
}

// The log calls a run of the test above does not reach keep to the same
// rule: no call in the bridge's code names an attribute like one of
// slog's own keys, or names one twice. Read from the source: a call's
// attributes are its arguments after the message, as slog reads them
// (a string key and its value, or one slog.Attr), up to the first it
// cannot tell (a variable's spread).
func TestLogCallsKeepSlogKeys(t *testing.T) {
	fset := token.NewFileSet()
	calls := 0
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && (d.Name() == "e2e" || d.Name() == "testing" || d.Name() == "bench" || d.Name() == "testdata"):
			return filepath.SkipDir
		case d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go"):
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if call, ok := n.(*ast.CallExpr); ok {
				if keys, ok := logKeys(call); ok {
					calls++
					if err := checkKeys(keys); err != nil {
						t.Errorf("%s: %v", fset.Position(call.Pos()), err)
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls < 100 {
		t.Fatalf("found only %d log calls in the bridge's code", calls)
	}
}

// logKeys returns the attribute keys of a call to a slog.Logger's
// Debug, Info, Warn, Error or With, or to logrepeat's Succeeded or
// Failed, with ok false for any other call. Other calls of those names
// (http.Error, a plugin's Info) have no string literal where a key would
// be, and yield no keys.
func logKeys(call *ast.CallExpr) (keys []string, ok bool) {
	sel, isSel := call.Fun.(*ast.SelectorExpr)
	if !isSel {
		return nil, false
	}
	first := 0 // the first attribute's argument
	switch sel.Sel.Name {
	case "With":
	case "Debug", "Info", "Warn", "Error": // (msg, args...)
		first = 1
	case "Succeeded": // (log, msg, args...)
		first = 2
	case "Failed": // (log, msg, err, args...), err logged as "error"
		first, keys = 3, []string{"error"}
	default:
		return nil, false
	}
	if len(call.Args) < first {
		return nil, false
	}
	for attrs := call.Args[first:]; len(attrs) > 0; {
		key, n := attrKey(attrs)
		if n == 0 {
			break
		}
		keys, attrs = append(keys, key), attrs[min(n, len(attrs)):]
	}
	return keys, true
}

// attrKey reads the attribute that args start with, as slog does: a
// string literal key (two arguments, the key and its value) or a call of
// a slog function whose first argument is the key (one, an Attr). n is
// 0 for what it cannot tell.
func attrKey(args []ast.Expr) (key string, n int) {
	if key, ok := stringLit(args[0]); ok {
		return key, 2
	}
	c, ok := args[0].(*ast.CallExpr)
	if !ok || len(c.Args) == 0 {
		return "", 0
	}
	f, ok := c.Fun.(*ast.SelectorExpr)
	if !ok {
		return "", 0
	}
	if pkg, ok := f.X.(*ast.Ident); !ok || pkg.Name != "slog" {
		return "", 0
	}
	if key, ok := stringLit(c.Args[0]); ok {
		return key, 1
	}
	return "", 0
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// checkKeys is nil unless a key is one of slog's or given twice.
func checkKeys(keys []string) error {
	seen := map[string]bool{}
	for _, k := range keys {
		if k == slog.TimeKey || k == slog.LevelKey || k == slog.MessageKey || k == slog.SourceKey {
			return fmt.Errorf("attribute %q is a key slog writes itself", k)
		}
		if seen[k] {
			return fmt.Errorf("attribute %q given twice", k)
		}
		seen[k] = true
	}
	return nil
}
