package invoke

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors for a plugin that could not be run or misbehaved. Errors
// returned by this package wrap at most one of them; a plugin's own error
// document is returned as a *spec.Error instead.
var (
	// ErrNotFound: the plugin binary is not in the search path, or the
	// file named does not exist.
	ErrNotFound = errors.New("plugin not found")
	// ErrExec: the plugin could not be started, or it was killed by a
	// signal it did not ask for.
	ErrExec = errors.New("plugin could not be run")
	// ErrTimeout: the plugin did not finish before the deadline and was
	// killed together with every process it started.
	ErrTimeout = errors.New("plugin timed out")
	// ErrBadOutput: stdout is not the one protocol document the command
	// calls for (empty on failure, not JSON, too large, several documents,
	// or a result in another cdiVersion than the one asked for).
	ErrBadOutput = errors.New("plugin printed bad output")
	// ErrIncompatible: the plugin and this caller share no protocol
	// version, or the negotiated version lacks the command or parameter.
	ErrIncompatible = errors.New("incompatible plugin")
)

// ErrNotRegular is wrapped by the error for a drop-in that is not a regular
// file (or a link to one): a FIFO, a socket, a device. Reading one could
// block for ever or never end, so it is refused unread.
var ErrNotRegular = errors.New("not a regular file")

// maxStderrInMessage bounds how much of a plugin's stderr an error message
// carries. The head is kept: a Go panic or a shell error puts its cause first.
const maxStderrInMessage = 4 << 10

// stderrNote formats a plugin's stderr for the end of an error message, or
// returns "" when the plugin printed nothing there.
func stderrNote(stderr []byte) string {
	s := strings.TrimSpace(string(stderr))
	if s == "" {
		return ""
	}
	if len(s) > maxStderrInMessage {
		s = s[:maxStderrInMessage] + "...(truncated)"
	}
	return fmt.Sprintf("; stderr: %q", s)
}

// quoteOutput shows a short prefix of a bad stdout in an error message.
func quoteOutput(stdout []byte) string {
	const max = 256
	if len(stdout) > max {
		return fmt.Sprintf("%q...(%d bytes)", stdout[:max], len(stdout))
	}
	return fmt.Sprintf("%q", stdout)
}
