package doctest

import (
	"bytes"
	"context"
	"encoding/json"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cdiexec/cdi/plugins/exectest"
	"github.com/cdiexec/cdi/spec/conformance"
)

// guide is the document, from the module root, that holds the worked
// example; guideHeading starts the example in it.
const (
	guide        = "plugins/WRITING.md"
	guideHeading = "## A worked example"
)

// TestGuideExample builds the worked example of plugins/WRITING.md
// exactly as it stands there, and runs the conformance checks
// against it on the fixture host with the drop-in shown beside it: the
// code must compile, be gofmt'd and pass every rule.
func TestGuideExample(t *testing.T) {
	root, err := exectest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(guide)))
	if err != nil {
		t.Fatal(err)
	}
	code, dropIn := guideBlocks(t, string(text))
	if formatted, err := format.Source([]byte(code)); err != nil || string(formatted) != code {
		t.Fatalf("the example in %s is not gofmt'd Go (parse error: %v); gofmt gives:\n%s", guide, err, formatted)
	}
	bin := buildGuide(t, root, code)
	rep, err := conformance.Run(context.Background(), conformance.Options{Plugin: bin, DropIn: onFixture(t, dropIn)})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	rep.WriteTable(&out)
	if rep.Failed() || strings.Contains(out.String(), "SKIP ") {
		t.Fatalf("want every rule to pass:\n%s", out.String())
	}
}

// guideBlocks returns the first Go block and the first JSON block after
// the worked example's heading.
func guideBlocks(t *testing.T, text string) (code, dropIn string) {
	_, after, ok := strings.Cut(text, guideHeading)
	if !ok {
		t.Fatalf("%s has no %q", guide, guideHeading)
	}
	block := func(fence string) string {
		_, rest, ok := strings.Cut(after, "\n"+fence+"\n")
		body, _, closed := strings.Cut(rest, "\n```\n")
		if !ok || !closed {
			t.Fatalf("no %s block after %q in %s", fence, guideHeading, guide)
		}
		return body + "\n"
	}
	return block("```go"), block("```json")
}

// buildGuide compiles code as if it were a main package inside this
// module, where it may import plugins/internal/engine, through an overlay:
// the package directory exists only for the build.
func buildGuide(t *testing.T, root, code string) string {
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	overlay, err := json.Marshal(map[string]any{"Replace": map[string]string{
		filepath.Join(root, "plugins", "internal", "testing", "doctest", "guide", "main.go"): src,
	}})
	if err != nil {
		t.Fatal(err)
	}
	overlayFile := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlayFile, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "serial")
	cmd := exec.Command("go", "build", "-overlay", overlayFile, "-o", bin, "./plugins/internal/testing/doctest/guide")
	cmd.Dir, cmd.Env = root, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the example of %s: %v\n%s", guide, err, out)
	}
	return bin
}

// onFixture points the drop-in's root at the fixture host; the
// conformance checks replace its stateDir themselves.
func onFixture(t *testing.T, dropIn string) []byte {
	var doc map[string]any
	if err := json.Unmarshal([]byte(dropIn), &doc); err != nil {
		t.Fatalf("the drop-in in %s: %v", guide, err)
	}
	args, _ := doc["args"].(map[string]any)
	if args == nil {
		t.Fatalf("the drop-in in %s has no args: %s", guide, dropIn)
	}
	args["root"] = exectest.FixtureRoot(t)
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
