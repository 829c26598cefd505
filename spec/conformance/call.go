package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/cdiexec/cdi/spec/invoke"
)

// subject is the plugin as one rule sees it: the binary, the drop-in with
// the rule's own state directory, and what the probe learned.
type subject struct {
	rule     string
	plugin   string
	dropIn   *dropIn
	stateDir string // "" when the drop-in has no args.stateDir
	conf     []byte // the drop-in as this rule sends it
	timeout  time.Duration
	token    string // makes this run's request-ids its own
	facts    *facts

	mu    sync.Mutex
	added []string // request-ids this rule allocated, for cleanup
}

// reply is one run of the plugin.
type reply struct {
	command string // CDI_COMMAND as sent, or "" when unset
	label   string // the variables sent, for messages
	stdout  []byte
	stderr  []byte
	status  int
	runErr  error // the plugin could not be run, timed out or flooded stdout
	// doc is stdout's one JSON object, nil when stdout is empty; docErr
	// says why stdout is neither.
	doc    map[string]json.RawMessage
	docErr error
}

// call runs the plugin with exactly the variables given ("NAME=value",
// plus PATH) and the rule's drop-in on stdin.
func (s *subject) call(ctx context.Context, vars ...string) *reply {
	return s.callWith(ctx, s.conf, vars...)
}

// callWith is call with another stdin.
func (s *subject) callWith(ctx context.Context, stdin []byte, vars ...string) *reply {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	r := &reply{label: strings.Join(vars, " ")}
	for _, v := range vars {
		if cmd, ok := strings.CutPrefix(v, "CDI_COMMAND="); ok {
			r.command = strings.ToUpper(cmd)
		}
	}
	if r.label == "" {
		r.label = "no variables"
	}
	env := append(append([]string{}, vars...), "PATH="+searchPath())
	out, err := invoke.ProcessExec{}.ExecPlugin(ctx, s.plugin, stdin, env)
	r.runErr = err
	if out != nil {
		r.stdout, r.stderr, r.status = out.Stdout, out.Stderr, out.ExitStatus
	}
	if err == nil {
		r.doc, r.docErr = oneDocument(r.stdout)
	}
	return r
}

// feed is callWith for a stdin other than the rule's drop-in, which note
// names in messages.
func (s *subject) feed(ctx context.Context, stdin []byte, note string, vars ...string) *reply {
	r := s.callWith(ctx, stdin, vars...)
	r.label += " < " + note
	return r
}

// searchPath is the PATH a plugin gets, as invoke.Plugin gives it.
func searchPath() string {
	if p := os.Getenv("PATH"); p != "" {
		return p
	}
	return "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
}

// oneDocument parses stdout as exactly one JSON object with nothing but
// white space around it. Empty stdout is no document and no error.
func oneDocument(stdout []byte) (map[string]json.RawMessage, error) {
	if len(bytes.TrimSpace(stdout)) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(stdout))
	var doc map[string]json.RawMessage
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("stdout is not a JSON object (%v): %s", err, quote(stdout))
	}
	if doc == nil {
		return nil, fmt.Errorf("stdout is JSON null, not an object")
	}
	rest := bytes.TrimSpace(stdout[dec.InputOffset():])
	switch {
	case len(rest) > 0 && json.Valid(firstValue(rest)):
		return nil, fmt.Errorf("stdout holds more than one JSON document: %s", quote(stdout))
	case len(rest) > 0:
		return nil, fmt.Errorf("stdout has %s after its JSON document", quote(rest))
	}
	return doc, nil
}

// firstValue returns the first JSON value at the start of b, or b when
// there is none.
func firstValue(b []byte) []byte {
	dec := json.NewDecoder(bytes.NewReader(b))
	var v json.RawMessage
	if dec.Decode(&v) != nil {
		return b
	}
	return v
}

// quote shows at most 160 bytes of a plugin's output in a message, its
// white space collapsed so that a document fits on one line.
func quote(b []byte) string {
	const max = 160
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > max {
		s = s[:max] + "..."
	}
	if strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return strconv.Quote(s)
	}
	return "`" + s + "`"
}

// requestID returns a request-id of this run and rule, distinct for each n.
func (s *subject) requestID(n int) string {
	return fmt.Sprintf("%s-%s-%d", s.token, s.rule, n)
}

// track remembers a request-id this rule allocated, to DEL it at the end.
func (s *subject) track(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.added = append(s.added, id)
}

// cleanup DELs what the rule allocated when the rules share the plugin's
// own state; a scratch directory simply goes away.
func (s *subject) cleanup(ctx context.Context) {
	if s.stateDir != "" {
		return
	}
	for _, id := range s.added {
		s.call(ctx, "CDI_COMMAND=DEL", "CDI_VERSION="+s.facts.version, "CDI_REQUEST_ID="+id)
	}
}
