package doctest

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cdiexec/cdi/plugins/exectest"
)

func TestCommands(t *testing.T) {
	text := "make demo   # comment\n" +
		"env -i A=1 B='two words' \\\n    /opt/x < /etc/y.conf\n" +
		"dir=$(mktemp -d)\n" +
		"a --x \"$dir/f\" --y \"\" | jq -c 'select(.level != \"INFO\")'   # c\n" +
		"k port-forward <pod> 8089 &  curl -s localhost:8089/metrics\n" +
		"# a line of comment\n"
	want := [][]string{
		{"make", "demo"},
		{"env", "-i", "A=1", "B=two words", "/opt/x", "<", "/etc/y.conf"},
		{"dir=$(mktemp -d)"},
		{"a", "--x", "$dir/f", "--y", ""}, {"jq", "-c", `select(.level != "INFO")`},
		{"k", "port-forward", "<pod>", "8089"}, {"curl", "-s", "localhost:8089/metrics"},
	}
	if got := Commands(text); !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("Commands:\n%q\nwant\n%q", got, want)
	}
	blocks := ShellBlocks("text\n```sh\nmake demo\n```\n```yaml\nx: 1\n```\n  ```sh\na\nb\n  ```\n")
	if len(blocks) != 2 || blocks[0].Line != 2 || blocks[0].Body != "make demo\n" || blocks[1].Body != "a\nb\n" {
		t.Errorf("ShellBlocks: %+v", blocks)
	}
}

// readmes are the documents, from the module root, whose shell commands
// the tests below hold to the tools: their fenced sh blocks, wherever
// they are. The README is the operator's first read; bridge/README.md
// the operator's reference.
var readmes = []string{"README.md", "bridge/README.md"}

// toolDir holds the programs the readmes' commands run, built once: the
// project's tools and the plugins the shipped drop-ins name.
var toolDir string

func TestMain(m *testing.M) {
	exectest.MainDir(m, &toolDir, "github.com/cdiexec/cdi/spec/cmd/cditool", "github.com/cdiexec/cdi/bridge/cmd/cdi-bridge",
		"github.com/cdiexec/cdi/plugins/drm", "github.com/cdiexec/cdi/plugins/generic", "github.com/cdiexec/cdi/plugins/generic-tty",
		"github.com/cdiexec/cdi/plugins/endpoint")
}

// TestReadmeCommands checks every command of the readmes' sh blocks
// against what it runs: a make target must be the Makefile's, each flag
// of cditool and cdi-bridge must be in its --help and each cditool
// command among those the help lists, a plugin run by its path must be
// one of plugins/, and a drop-in of /etc/cdi given on stdin must be one
// make install puts there. Programs of other projects (kubectl, helm)
// pass unchecked, by name; any other program fails, so that a new command
// gets a check.
func TestReadmeCommands(t *testing.T) {
	root, blocks := readmeBlocks(t)
	c := newReadmeChecker(t, root, toolDir)
	n := 0
	for _, b := range blocks {
		for _, cmd := range Commands(b.Body) {
			n++
			if err := c.check(cmd); err != nil {
				t.Errorf("%s, the block at line %d: %q: %v", b.Doc, b.Line, cmd, err)
			}
		}
	}
	if n < 30 {
		t.Errorf("only %d commands in the sh blocks of %v", n, readmes)
	}
}

// docBlock is a sh block of one of the readmes.
type docBlock struct {
	ShellBlock
	Doc string // the readme's path from the module root
}

// readmeBlocks returns the module's root and the readmes' sh blocks.
func readmeBlocks(t *testing.T) (string, []docBlock) {
	t.Helper()
	root, err := exectest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	var blocks []docBlock
	for _, doc := range readmes {
		text, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range ShellBlocks(string(text)) {
			blocks = append(blocks, docBlock{b, doc})
		}
	}
	return root, blocks
}

// readmeChecker knows what the readmes' commands may name.
type readmeChecker struct {
	bin       string            // the built tools
	help      map[string]string // --help of cditool and cdi-bridge
	targets   map[string]bool   // the Makefile's
	plugins   map[string]bool   // plugins/<name>/main.go
	installed map[string]bool   // conf.d's drop-ins that make install installs
}

func newReadmeChecker(t *testing.T, root, bin string) *readmeChecker {
	c := &readmeChecker{bin: bin, help: map[string]string{}, targets: map[string]bool{}, plugins: map[string]bool{}, installed: map[string]bool{}}
	for _, tool := range []string{"cditool", "cdi-bridge"} {
		out, err := exec.Command(filepath.Join(bin, tool), "--help").CombinedOutput()
		if err != nil {
			t.Fatalf("%s --help: %v\n%s", tool, err, out)
		}
		c.help[tool] = string(out)
	}
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*):`).FindAllStringSubmatch(string(makefile), -1) {
		c.targets[m[1]] = true
	}
	mains, _ := filepath.Glob(filepath.Join(root, "plugins", "*", "main.go"))
	for _, m := range mains {
		c.plugins[filepath.Base(filepath.Dir(m))] = true
	}
	list, err := os.ReadFile(filepath.Join(root, "conf.d", "node-defaults.list"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(list)) {
		if f, _, _ := strings.Cut(line, "#"); strings.TrimSpace(f) != "" {
			c.installed[strings.TrimSpace(f)] = true
		}
	}
	return c
}

// otherProjects are the programs of other projects the readmes run.
func otherProjects(prog string) bool {
	switch prog {
	case "kubectl", "helm", "kind", "ctr", "curl", "jq", "skopeo", "kustomize", "mktemp":
		return true
	}
	return false
}

// assignment is a shell word that sets a variable.
var assignment = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

func (c *readmeChecker) check(words []string) error {
	for len(words) > 0 && assignment.MatchString(words[0]) {
		words = words[1:] // an assignment
	}
	if len(words) == 0 {
		return nil
	}
	if words[0] == "env" {
		for words = words[1:]; len(words) > 0 && (strings.HasPrefix(words[0], "-") || strings.Contains(words[0], "=")); words = words[1:] {
		}
		if len(words) == 0 {
			return nil
		}
	}
	words, stdin := withoutStdin(words)
	if err := c.dropIn(stdin); err != nil {
		return err
	}
	prog, args := words[0], words[1:]
	switch base := path.Base(prog); {
	case prog == "make":
		return c.makeTargets(args)
	case base == "cditool" || base == "cdi-bridge":
		return c.flags(base, args)
	case strings.Contains(prog, "/") && c.plugins[base]:
		return nil
	case prog == "kubectl" && slices.Contains(args, "exec") && slices.Contains(args, "--"):
		return c.check(args[slices.Index(args, "--")+1:])
	case otherProjects(prog):
		return nil
	}
	return fmt.Errorf("%s: a program this test does not know: check its commands here, or name it among the other projects'", prog)
}

// withoutStdin returns words without a "< file" redirection, and the file.
func withoutStdin(words []string) ([]string, string) {
	i := slices.Index(words, "<")
	if i < 0 || i+1 >= len(words) {
		return words, ""
	}
	return append(slices.Clone(words[:i]), words[i+2:]...), words[i+1]
}

// dropIn checks a drop-in of the host's /etc/cdi that a command reads:
// make install must put it there. Other files are the reader's own.
func (c *readmeChecker) dropIn(file string) error {
	rel, ok := strings.CutPrefix(file, "/etc/cdi/")
	if !ok || c.installed[rel] {
		return nil
	}
	return fmt.Errorf("%s: no drop-in make install puts there (conf.d/node-defaults.list)", file)
}

func (c *readmeChecker) makeTargets(args []string) error {
	for _, a := range args {
		if !strings.Contains(a, "=") && !c.targets[a] {
			return fmt.Errorf("make %s: no such target in the Makefile", a)
		}
	}
	return nil
}

// flags checks a tool's flags, as --help names them (Go's flag package
// prints "-name"), and cditool's command; a cdi-bridge command line must
// also parse, run with --version added in a fresh machine's environment,
// its variables unset.
func (c *readmeChecker) flags(tool string, args []string) error {
	command := ""
	for i, a := range args {
		switch {
		case a == "-h" || a == "--help":
		case strings.HasPrefix(a, "-"):
			name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if !regexp.MustCompile(`(?m)^  -` + regexp.QuoteMeta(name) + `\b`).MatchString(c.help[tool]) {
				return fmt.Errorf("%s: --%s is not among the flags of its --help", tool, name)
			}
		case command == "" && (i == 0 || !c.takesValue(tool, args[i-1])):
			command = a
		}
	}
	switch {
	case tool == "cditool" && command != "" && !regexp.MustCompile(`(?m)^  `+regexp.QuoteMeta(command)+` `).MatchString(c.help[tool]):
		return fmt.Errorf("cditool %s: not a command its --help lists", command)
	case tool == "cdi-bridge" && !slices.Contains(args, "--help"):
		return c.parses(args)
	}
	return nil
}

// parses runs cdi-bridge with args, their $variables unset, and
// --version, in a fresh machine's environment: it exits 0 once the
// command line has been read and checked.
func (c *readmeChecker) parses(args []string) error {
	unset := regexp.MustCompile(`\$\{?[A-Za-z_][A-Za-z0-9_]*\}?`)
	var expanded []string
	for _, a := range args {
		expanded = append(expanded, unset.ReplaceAllString(a, ""))
	}
	cmd := exec.Command(filepath.Join(c.bin, "cdi-bridge"), append(expanded, "--version")...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent"}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("does not parse as written on a machine without those variables: %v: %s", err, out)
	}
	return nil
}

// takesValue says whether flag, of tool, is followed by its value: its
// help line names one ("-conf-dir directory"), where a bool flag's does
// not.
func (c *readmeChecker) takesValue(tool, flag string) bool {
	name, isFlag := strings.CutPrefix(flag, "-")
	name = strings.TrimPrefix(name, "-")
	return isFlag && !strings.Contains(name, "=") && regexp.MustCompile(`(?m)^  -`+regexp.QuoteMeta(name)+` \S`).MatchString(c.help[tool])
}

// The readmes' sh blocks that start with `dir=$(mktemp -d)` say they
// write nothing outside that directory and need neither root nor a
// kubelet: each runs as written, with a fresh machine's environment (no
// NODE_NAME), from a directory laid out as a clone after make build
// (bin/ with the tools and plugins, conf.d/ the repository's). The bridge
// such a block starts must discover and start its device plugins, and
// stop on SIGTERM, with its spec files and store in that directory.
func TestReadmeTryBlocks(t *testing.T) {
	root, all := readmeBlocks(t)
	var blocks []docBlock
	for _, b := range all {
		if strings.HasPrefix(b.Body, "dir=$(mktemp -d)\n") {
			blocks = append(blocks, b)
		}
	}
	if len(blocks) == 0 {
		t.Fatalf("no sh block of %v starts with dir=$(mktemp -d)", readmes)
	}
	clone := t.TempDir()
	for name, target := range map[string]string{"bin": toolDir, "conf.d": filepath.Join(root, "conf.d")} {
		if err := os.Symlink(target, filepath.Join(clone, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range blocks {
		t.Run(fmt.Sprint(b.Doc, " line ", b.Line), func(t *testing.T) { runTryBlock(t, clone, b.Body) })
	}
}

func runTryBlock(t *testing.T, clone, block string) {
	_, cdiBefore := os.Stat("/var/run/cdi")
	tmp := t.TempDir()
	cmd := exec.Command("sh", "-c", block)
	cmd.Dir = clone
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "TMPDIR=" + tmp}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan map[string]any, 1000)
	var log strings.Builder
	go readLog(io.TeeReader(stderr, &log), lines)
	record := awaitRecord(lines, 60*time.Second, "device plugins changed")
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	stopped := awaitRecord(lines, 30*time.Second, "stopped")
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	_ = cmd.Wait()
	if record == nil || stopped == nil {
		t.Fatalf("the bridge did not discover and stop (SIGTERM) as the block runs it; its log:\n%s", log.String())
	}
	for _, msg := range []string{"CDI spec files", "instance store: local file"} {
		for _, r := range records(log.String(), msg) {
			for _, key := range []string{"dir", "file"} {
				if p, ok := r[key].(string); ok && !strings.HasPrefix(p, tmp+"/") {
					t.Errorf("%q: %s %s is outside the block's temporary directory %s", msg, key, p, tmp)
				}
			}
		}
	}
	if _, err := os.Stat("/var/run/cdi"); errors.Is(cdiBefore, os.ErrNotExist) && err == nil {
		t.Error("the block made /var/run/cdi")
	}
}

// readLog sends each JSON line of r, then closes lines.
func readLog(r io.Reader, lines chan<- map[string]any) {
	defer close(lines)
	s := bufio.NewScanner(r)
	s.Buffer(nil, 1<<20)
	for s.Scan() {
		var rec map[string]any
		if json.Unmarshal(s.Bytes(), &rec) == nil {
			lines <- rec
		}
	}
}

// awaitRecord returns the first record whose msg is msg, or nil when the
// log ends or timeout passes first.
func awaitRecord(lines <-chan map[string]any, timeout time.Duration, msg string) map[string]any {
	deadline := time.After(timeout)
	for {
		select {
		case r, ok := <-lines:
			if !ok {
				return nil
			}
			if r["msg"] == msg {
				return r
			}
		case <-deadline:
			return nil
		}
	}
}

// records is the JSON records of log whose msg is msg.
func records(log, msg string) []map[string]any {
	var out []map[string]any
	for line := range strings.Lines(log) {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}
