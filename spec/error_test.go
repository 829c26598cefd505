package spec

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"testing"
)

func TestErrorJSON(t *testing.T) {
	e := NewError(CodeIncompatibleVersion, "Unsupported version: %s", "0.999")
	e.CDIVersion = "0.0.1"
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"cdiVersion":"0.0.1","code":1,"msg":"Incompatible CDI version","details":"Unsupported version: 0.999"}`
	if string(b) != want {
		t.Fatalf("got %s\nwant %s", b, want)
	}
	b, _ = json.Marshal(NewError(CodeUnknownRequestID, ""))
	if string(b) != `{"code":5,"msg":"Unknown request ID"}` {
		t.Fatalf("empty details not omitted: %s", b)
	}
}

func TestErrorChain(t *testing.T) {
	err := fmt.Errorf("adding: %w", NewError(CodeStateError, "reading %s: %w", "/x", fs.ErrNotExist))
	if CodeOf(err) != CodeStateError {
		t.Errorf("CodeOf = %d", CodeOf(err))
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Error("cause lost")
	}
	if !errors.Is(err, &Error{Code: CodeStateError}) || errors.Is(err, &Error{Code: CodeInternal}) {
		t.Error("Is by code does not work")
	}
	if CodeOf(errors.New("plain")) != 0 {
		t.Error("CodeOf(plain) != 0")
	}
}

func TestWellKnownCodesHaveMessages(t *testing.T) {
	codes := WellKnownCodes()
	if len(codes) != 15 {
		t.Fatalf("%d codes, want 15", len(codes))
	}
	for _, c := range codes {
		if c.Message() == "" {
			t.Errorf("code %d has no message", c)
		}
	}
	if Code(16).Message() != "" {
		t.Error("a reserved, undefined code has a message")
	}
	if CodePluginMin.Message() != "Plugin error" {
		t.Errorf("plugin code message = %q, want the generic one", CodePluginMin.Message())
	}
}
