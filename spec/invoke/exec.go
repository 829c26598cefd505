package invoke

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Limits and delays of ProcessExec.
const (
	// MaxStdoutSize bounds what is read from a plugin's stdout. Real
	// documents are kilobytes; a plugin printing more is broken.
	MaxStdoutSize = 16 << 20
	// MaxStderrSize bounds how much of a plugin's stderr is kept for
	// diagnostics. The rest is read and dropped so the plugin never blocks.
	MaxStderrSize = 64 << 10
	// DefaultWaitDelay is how long Wait waits for stdout and stderr to
	// close once the plugin has exited or been killed. Only a descendant
	// that escaped the plugin's process group and still holds the pipes
	// makes this wait expire.
	DefaultWaitDelay = 500 * time.Millisecond

	// A binary that is being installed cannot be run while it is still open
	// for writing (ETXTBSY); retry briefly, as CNI does.
	textBusyRetries = 5
	textBusyDelay   = 100 * time.Millisecond
)

// Exec runs a plugin binary. It is the seam between the protocol logic and
// processes: ProcessExec runs real ones, fakeexec.Exec answers from a table.
type Exec interface {
	// ExecPlugin runs the binary at path with exactly the environment env
	// (NAME=value, nothing inherited) and stdin on its standard input. A
	// plugin that ran to completion gives an Output and a nil error, whatever
	// its exit status. The error is for a plugin that could not be started,
	// was killed, timed out or overflowed stdout; it wraps one of ErrNotFound,
	// ErrExec, ErrTimeout or ErrBadOutput, and Output may still be non-nil.
	ExecPlugin(ctx context.Context, path string, stdin []byte, env []string) (*Output, error)
}

// Output is what a plugin that ran to completion left behind.
type Output struct {
	Stdout []byte
	// Stderr is the head of the plugin's stderr, for diagnostics.
	Stderr []byte
	// ExitStatus is the plugin's exit status, 0 for success.
	ExitStatus int
}

// ProcessExec runs plugins as child processes. The zero value uses the
// package defaults.
//
// It exists instead of CNI's invoke.RawExec because RawExec neither puts the
// plugin in its own process group nor sets WaitDelay: on a timeout it kills
// only the plugin, and a grandchild that inherited stdout keeps Wait blocked
// for as long as it lives. ProcessExec kills the whole group when ctx is done
// and stops waiting for the pipes DefaultWaitDelay later, so a hung plugin
// cannot hang its caller.
type ProcessExec struct {
	MaxStdout int           // 0: MaxStdoutSize
	MaxStderr int           // 0: MaxStderrSize
	WaitDelay time.Duration // 0: DefaultWaitDelay
}

var _ Exec = ProcessExec{}

// ExecPlugin implements Exec.
func (e ProcessExec) ExecPlugin(ctx context.Context, path string, stdin []byte, env []string) (*Output, error) {
	return e.execReader(ctx, path, func() io.Reader { return bytes.NewReader(stdin) }, env)
}

// execReader runs the plugin with stdin from a fresh reader per attempt.
func (e ProcessExec) execReader(ctx context.Context, path string, stdin func() io.Reader, env []string) (*Output, error) {
	for attempt := 0; ; attempt++ {
		out, err := e.run(ctx, path, stdin(), env)
		if !errors.Is(err, syscall.ETXTBSY) || attempt == textBusyRetries {
			return out, err
		}
		select {
		case <-ctx.Done():
			return out, err
		case <-time.After(textBusyDelay):
		}
	}
}

func (e ProcessExec) run(ctx context.Context, path string, stdin io.Reader, env []string) (*Output, error) {
	stdout := &limitedBuffer{limit: orDefault(e.MaxStdout, MaxStdoutSize), failOnOverflow: true}
	stderr := &limitedBuffer{limit: orDefault(e.MaxStderr, MaxStderrSize)}
	cmd := exec.CommandContext(ctx, path)
	// A nil Env would make the child inherit ours; see Plugin for why not.
	cmd.Env = append([]string{}, env...)
	cmd.Stdin = stdin
	cmd.Stdout = stdout
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killGroup(cmd.Process) }
	cmd.WaitDelay = e.WaitDelay
	if cmd.WaitDelay <= 0 {
		cmd.WaitDelay = DefaultWaitDelay
	}
	runErr := cmd.Run()
	out := &Output{Stdout: stdout.buf.Bytes(), Stderr: stderr.buf.Bytes()}
	if cmd.ProcessState != nil {
		out.ExitStatus = cmd.ProcessState.ExitCode()
	}
	return out, classify(ctx, cmd, runErr, stdout, out.Stderr)
}

// killGroup kills the plugin and everything it started that stayed in its
// process group; Setpgid made the group's id the plugin's pid.
func killGroup(p *os.Process) error {
	err := syscall.Kill(-p.Pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}

// classify turns the outcome of cmd.Run into this package's errors. A
// non-zero exit is not an error here: the caller reads the error document.
func classify(ctx context.Context, cmd *exec.Cmd, runErr error, stdout *limitedBuffer, stderr []byte) error {
	path := cmd.Path
	switch {
	case stdout.overflowed:
		return fmt.Errorf("%w: %s printed more than %d bytes on stdout%s", ErrBadOutput, path, stdout.limit, stderrNote(stderr))
	case runErr == nil || errors.Is(runErr, exec.ErrWaitDelay):
		// ErrWaitDelay: the plugin exited 0 but left a descendant holding
		// stdout; what it printed before exiting is complete.
		return nil
	case ctx.Err() != nil:
		return ctxError(ctx, path, stderr)
	case cmd.Process == nil:
		return startError(path, runErr)
	}
	var exitErr *exec.ExitError
	if errors.As(runErr, &exitErr) {
		if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return fmt.Errorf("%w: %s was killed by signal %v%s", ErrExec, path, ws.Signal(), stderrNote(stderr))
		}
		return nil
	}
	return fmt.Errorf("%w: running %s: %w%s", ErrExec, path, runErr, stderrNote(stderr))
}

func ctxError(ctx context.Context, path string, stderr []byte) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w: %s did not finish before its deadline and was killed%s", ErrTimeout, path, stderrNote(stderr))
	}
	return fmt.Errorf("%w: %s was killed: %w%s", ErrExec, path, ctx.Err(), stderrNote(stderr))
}

func startError(path string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		// Also what a script with a missing interpreter gets.
		return fmt.Errorf("%w: starting %s: %w", ErrNotFound, path, err)
	}
	return fmt.Errorf("%w: starting %s: %w", ErrExec, path, err)
}

// limitedBuffer keeps the first limit bytes written to it. Past the limit it
// either fails the write, which makes exec close the pipe so that the
// plugin gets EPIPE instead of filling memory, or drops the rest.
type limitedBuffer struct {
	buf            bytes.Buffer
	limit          int
	failOnOverflow bool
	overflowed     bool
}

var errOverflow = errors.New("output limit reached")

func (b *limitedBuffer) Write(p []byte) (int, error) {
	room := b.limit - b.buf.Len()
	if len(p) <= room {
		return b.buf.Write(p)
	}
	b.buf.Write(p[:max(room, 0)])
	b.overflowed = true
	if b.failOnOverflow {
		return max(room, 0), errOverflow
	}
	return len(p), nil
}

func orDefault(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}
