package invoke

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/cdiexec/cdi/spec"
)

// decode reads a plugin's stdout. An error document, whatever the exit
// status, is returned as a *spec.Error. Otherwise a failing exit, or output
// that is not exactly one result document in the version asked for, is
// ErrBadOutput. result is nil for DEL, whose success prints nothing.
func decode(path string, c call, out *Output, result any) error {
	stdout := bytes.TrimSpace(out.Stdout)
	if e := errorDocument(stdout); e != nil {
		return e
	}
	if out.ExitStatus != 0 {
		return badOutput(path, out, "exited with status %d without an error document", out.ExitStatus)
	}
	if result == nil {
		if len(stdout) == 0 {
			return nil
		}
		return badOutput(path, out, "succeeded but printed a document that is not an error")
	}
	if len(stdout) == 0 {
		return badOutput(path, out, "printed nothing")
	}
	if err := decodeOne(stdout, result); err != nil {
		return badOutput(path, out, "%v", err)
	}
	return checkVersion(path, c, out, stdout)
}

// errorDocument returns stdout as an error document, or nil if it is not
// one. An error document is a JSON object with an integer "code" other than
// 0 and a string "msg": requiring both keeps an INFO result whose
// resource-type happens to be "code" from passing for an error.
func errorDocument(stdout []byte) *spec.Error {
	var probe struct {
		CDIVersion string     `json:"cdiVersion"`
		Code       *spec.Code `json:"code"`
		Msg        *string    `json:"msg"`
		Details    string     `json:"details"`
	}
	if decodeOne(stdout, &probe) != nil || probe.Code == nil || probe.Msg == nil || *probe.Code == 0 {
		return nil
	}
	return &spec.Error{CDIVersion: probe.CDIVersion, Code: *probe.Code, Msg: *probe.Msg, Details: probe.Details}
}

// decodeOne decodes exactly one JSON value; unknown members are allowed so
// that newer plugins still work with older callers.
func decodeOne(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("stdout is not a valid result document: %v", err)
	}
	if dec.More() {
		return fmt.Errorf("stdout holds more than one JSON document")
	}
	return nil
}

// checkVersion makes sure the result is written in the version asked for,
// so a caller never reads a 0.0.1 document as if it were 0.1.0.
func checkVersion(path string, c call, out *Output, stdout []byte) error {
	var probe struct {
		CDIVersion string `json:"cdiVersion"`
	}
	_ = json.Unmarshal(stdout, &probe) // already decoded once
	if c.version != "" && probe.CDIVersion != c.version {
		return badOutput(path, out, "answered in cdiVersion %q, asked for %q", probe.CDIVersion, c.version)
	}
	return nil
}

func badOutput(path string, out *Output, format string, args ...any) error {
	return fmt.Errorf("%w: %s %s: stdout %s%s", ErrBadOutput, path, fmt.Sprintf(format, args...),
		quoteOutput(out.Stdout), stderrNote(out.Stderr))
}
