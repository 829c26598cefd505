package node

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// stopGrace is how long a program has after SIGTERM before SIGKILL.
const stopGrace = 15 * time.Second

// logTail is how many lines of each log a failed test prints; the whole
// logs are kept (see removeRoot).
const logTail = 80

// Proc is one of the node's programs, which a test may stop and start
// again. Its output, across restarts, is appended to one log file.
type Proc struct {
	Name    string
	LogPath string
	argv    []string
	env     []string
	cmd     *exec.Cmd
	done    chan struct{}
}

// StartProc starts argv (with env added to this process's environment)
// for the length of the test: it is stopped when the test ends, and the
// end of its log printed if the test failed.
func StartProc(t testing.TB, l Layout, name string, env []string, argv ...string) *Proc {
	t.Helper()
	p := &Proc{Name: name, LogPath: filepath.Join(l.Logs(), name+".log"), argv: argv, env: env}
	if err := os.MkdirAll(l.Logs(), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("the last %d lines of %s (%s):\n%s", logTail, name, p.LogPath, p.Tail(logTail))
		}
	})
	return p
}

// Start starts the program (again, after Stop).
func (p *Proc) Start() error {
	log, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "=== %s: starting %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(p.argv, " "))
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = log, log
	// A group of its own, so that Stop reaches what it started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("starting %s: %w", p.Name, err)
	}
	p.cmd, p.done = cmd, make(chan struct{})
	go func() {
		cmd.Wait()
		log.Close()
		close(p.done)
	}()
	return nil
}

// Stop sends SIGTERM to the program's process group, then SIGKILL after
// stopGrace, and waits for it to exit. Stopping a stopped program is a
// no-op.
func (p *Proc) Stop() error {
	if p.cmd == nil {
		return nil
	}
	defer func() { p.cmd = nil }()
	pgid := p.cmd.Process.Pid
	if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stopping %s: %w", p.Name, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(stopGrace):
	}
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("killing %s: %w", p.Name, err)
	}
	<-p.done
	return fmt.Errorf("%s did not exit within %v of SIGTERM", p.Name, stopGrace)
}

// Kill sends SIGKILL to the program's process group and waits for it to
// exit: a crash, which leaves behind what a clean stop would tidy (a
// Lease held, sockets). Killing a stopped program is a no-op.
func (p *Proc) Kill() error {
	if p.cmd == nil {
		return nil
	}
	defer func() { p.cmd = nil }()
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("killing %s: %w", p.Name, err)
	}
	<-p.done
	return nil
}

// Restart stops the program and starts it again with the same arguments.
func (p *Proc) Restart() error {
	if err := p.Stop(); err != nil {
		return err
	}
	return p.Start()
}

// Exited says whether the program has ended, and how, for the messages
// of waits that time out.
func (p *Proc) Exited() (bool, string) {
	if p.cmd == nil {
		return true, "stopped"
	}
	select {
	case <-p.done:
		return true, p.cmd.ProcessState.String()
	default:
		return false, ""
	}
}

// Tail returns the last n lines of the log.
func (p *Proc) Tail(n int) string {
	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		return err.Error()
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
