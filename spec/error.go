package spec

import (
	"errors"
	"fmt"
)

// Code identifies an error. Codes 1-99 are the protocol's (SPEC.md, "Errors");
// 100 and above are free for plugin-specific errors.
type Code int

// The well-known error codes. 1-5 are the draft's; 6-15 settle the cases the
// draft leaves without a code.
const (
	CodeIncompatibleVersion       Code = 1  // CDI_VERSION not supported
	CodeIncompatibleConfigVersion Code = 2  // config cdiVersion not supported
	CodeUnsupportedCommand        Code = 3  // unknown or unimplemented command
	CodeUnsupportedResource       Code = 4  // resource-spec not served by the plugin
	CodeUnknownRequestID          Code = 5  // no allocation for the request-id
	CodeMissingParameter          Code = 6  // a required environment variable is unset
	CodeInvalidParameter          Code = 7  // an environment variable's value is malformed
	CodeInvalidConfig             Code = 8  // stdin is not a valid configuration
	CodeTypeMismatch              Code = 9  // config type differs from its folder or the plugin's types
	CodeInsufficientResources     Code = 10 // the request cannot be met in its entirety
	CodeRequestConflict           Code = 11 // request-id already holds a different allocation
	CodeUnknownDevice             Code = 12 // CDI_REQUEST_DEVICES names a device the plugin lacks
	CodeStateError                Code = 13 // the plugin's state cannot be read, locked or written
	CodeInternal                  Code = 14 // any other failure inside the plugin
	CodeUnknownArg                Code = 15 // config args hold a member the plugin does not know

	// CodePluginMin is the first code a plugin may define for itself.
	CodePluginMin Code = 100
)

// Message returns the short message SPEC.md gives for a well-known code, or
// "" for a code it does not define.
func (c Code) Message() string {
	switch c {
	case CodeIncompatibleVersion:
		return "Incompatible CDI version"
	case CodeIncompatibleConfigVersion:
		return "Incompatible config version"
	case CodeUnsupportedCommand:
		return "Command unsupported"
	case CodeUnsupportedResource:
		return "resource-spec unsupported"
	case CodeUnknownRequestID:
		return "Unknown request ID"
	case CodeMissingParameter:
		return "Missing parameter"
	case CodeInvalidParameter:
		return "Invalid parameter"
	case CodeInvalidConfig:
		return "Invalid configuration"
	case CodeTypeMismatch:
		return "Configuration type mismatch"
	case CodeInsufficientResources:
		return "Insufficient resources"
	case CodeRequestConflict:
		return "Request ID conflict"
	case CodeUnknownDevice:
		return "Unknown device"
	case CodeStateError:
		return "State error"
	case CodeInternal:
		return "Internal error"
	case CodeUnknownArg:
		return "Unknown argument"
	}
	if c >= 100 {
		return "Plugin error"
	}
	return ""
}

// WellKnownCodes lists every code SPEC.md defines, in order.
func WellKnownCodes() []Code {
	var out []Code
	for c := CodeIncompatibleVersion; c <= CodeUnknownArg; c++ {
		out = append(out, c)
	}
	return out
}

// Error is the protocol's error document: what a plugin prints on stdout when
// a command fails, and what a caller decodes. It is also a Go error, so code
// inside plugins returns it and skel finds it again with errors.As.
type Error struct {
	CDIVersion string `json:"cdiVersion,omitempty"`
	Code       Code   `json:"code"`
	Msg        string `json:"msg"`
	Details    string `json:"details,omitempty"`

	cause error
}

// NewError returns an Error with the code's well-known message and details
// formatted from format and args. Any %w in format becomes the cause that
// errors.Is and errors.As see through Unwrap.
func NewError(code Code, format string, args ...any) *Error {
	wrapped := fmt.Errorf(format, args...)
	return &Error{Code: code, Msg: code.Message(), Details: wrapped.Error(), cause: errors.Unwrap(wrapped)}
}

// WrapError returns an Error with the code's well-known message whose details
// are err's text and whose cause is err.
func WrapError(code Code, err error) *Error {
	return &Error{Code: code, Msg: code.Message(), Details: err.Error(), cause: err}
}

// Error formats the error for logs: "msg (code N): details".
func (e *Error) Error() string {
	if e.Details == "" {
		return fmt.Sprintf("%s (code %d)", e.Msg, e.Code)
	}
	return fmt.Sprintf("%s (code %d): %s", e.Msg, e.Code, e.Details)
}

// Unwrap returns the cause given to NewError or WrapError, if any.
func (e *Error) Unwrap() error { return e.cause }

// Is makes errors.Is(err, &Error{Code: c}) match any Error with code c.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && t.Msg == "" && t.Details == ""
}

// CodeOf returns the code of the first Error in err's chain, or 0 when the
// chain holds none.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// ErrMalformed is wrapped by every parse error in this package, so callers
// can tell bad input from other failures with errors.Is.
var ErrMalformed = errors.New("malformed")
