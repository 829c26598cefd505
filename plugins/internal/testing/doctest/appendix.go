package doctest

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strings"
)

// Example is one command of the appendix and what it must print.
type Example struct {
	Line    int               // line of the command in SPEC.md
	Env     map[string]string // the variables after env -i
	Plugin  string            // base name of the binary
	Conf    string            // path of the configuration on stdin
	Want    string            // the JSON document shown; "" for no output
	Status  int               // the exit status the text states
	HasWant bool
}

// Appendix is what the appendix holds: its configurations by path, and
// its examples in order.
type Appendix struct {
	Confs    map[string]string
	Examples []Example
}

var (
	confPath   = regexp.MustCompile("^`(/etc/cdi/[^`]+\\.conf)`")
	exitStatus = regexp.MustCompile(`(?i)exit status (\d+)`)
)

// Parse reads SPEC.md from the appendix heading on.
func Parse(r io.Reader) (*Appendix, error) {
	lines, err := appendixLines(r)
	if err != nil {
		return nil, err
	}
	a := &Appendix{Confs: map[string]string{}}
	pendingConf := ""
	for i := 0; i < len(lines); i++ {
		l := lines[i].text
		switch {
		case confPath.MatchString(l):
			pendingConf = confPath.FindStringSubmatch(l)[1]
		case strings.HasPrefix(l, "```"):
			// Every fenced block is consumed whole, so that a closing
			// fence is never mistaken for an opening one.
			body, next := fenced(lines, i+1)
			switch {
			case l == "```json" && pendingConf != "":
				a.Confs[pendingConf], pendingConf = body, ""
			case l == "```" && strings.HasPrefix(body, "$ env -i "):
				ex, end, err := example(lines, body, lines[i].n, next+1)
				if err != nil {
					return nil, err
				}
				a.Examples = append(a.Examples, ex)
				next = end - 1
			}
			i = next
		}
	}
	return a, nil
}

type line struct {
	n    int
	text string
}

func appendixLines(r io.Reader) ([]line, error) {
	var out []line
	in := false
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		if strings.HasPrefix(sc.Text(), "## Appendix") {
			in = true
		}
		if in {
			out = append(out, line{n, sc.Text()})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !in {
		return nil, fmt.Errorf("no appendix heading")
	}
	return out, nil
}

// fenced returns the text up to the closing fence and the fence's index.
func fenced(lines []line, from int) (string, int) {
	var b strings.Builder
	for i := from; i < len(lines); i++ {
		if lines[i].text == "```" {
			return b.String(), i
		}
		b.WriteString(lines[i].text + "\n")
	}
	return b.String(), len(lines)
}

// example parses one command and looks, up to the next command or
// heading, for the JSON document it prints and its exit status.
func example(lines []line, cmd string, n, from int) (Example, int, error) {
	ex, err := parseCommand(cmd)
	if err != nil {
		return ex, 0, fmt.Errorf("SPEC.md:%d: %w", n, err)
	}
	ex.Line = n
	i := from
	for ; i < len(lines); i++ {
		l := lines[i].text
		if strings.HasPrefix(l, "#") || (l == "```" && i+1 < len(lines) && strings.HasPrefix(lines[i+1].text, "$ ")) {
			break
		}
		if l == "```json" && !ex.HasWant {
			body, end := fenced(lines, i+1)
			ex.Want, ex.HasWant, i = body, true, end
			continue
		}
		if m := exitStatus.FindStringSubmatch(l); m != nil {
			fmt.Sscan(m[1], &ex.Status)
			return ex, i + 1, nil
		}
	}
	return ex, i, fmt.Errorf("SPEC.md:%d: example states no exit status", n)
}

// parseCommand splits "$ env -i K=V ... /opt/cdi/bin/P < CONF".
func parseCommand(cmd string) (Example, error) {
	cmd = strings.ReplaceAll(strings.TrimPrefix(cmd, "$ env -i "), "\\\n", " ")
	f := strings.Fields(cmd)
	ex := Example{Env: map[string]string{}}
	for len(f) > 0 && strings.Contains(f[0], "=") && !strings.HasPrefix(f[0], "/") {
		k, v, _ := strings.Cut(f[0], "=")
		ex.Env[k] = v
		f = f[1:]
	}
	if len(f) != 3 || f[1] != "<" || !strings.HasPrefix(f[0], "/opt/cdi/bin/") {
		return ex, fmt.Errorf("command %q is not env -i VARS /opt/cdi/bin/PLUGIN < CONF", cmd)
	}
	ex.Plugin, ex.Conf = strings.TrimPrefix(f[0], "/opt/cdi/bin/"), f[2]
	return ex, nil
}
