package apitest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// stopGrace is how long a process has to exit after SIGTERM before its
// process group is killed.
const stopGrace = 10 * time.Second

// errExited is wrapped when a process ends before it became ready.
var errExited = errors.New("exited")

// process is a server started for a test, in a process group of its own
// so that stopping it stops whatever it started too.
type process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{}
	err     error // of Wait, once done is closed
}

// startProcess starts argv with its output appended to logPath.
func startProcess(name, logPath string, argv []string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Pdeathsig: a test binary killed by its timeout takes the server
	// with it instead of leaving it holding ports and files.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// pid is the process's id while it runs, else 0.
func (p *process) pid() int {
	if p == nil {
		return 0
	}
	select {
	case <-p.done:
		return 0
	default:
		return p.cmd.Process.Pid
	}
}

// stop ends the process group: SIGTERM, then SIGKILL after stopGrace.
func (p *process) stop() error {
	pgid := p.cmd.Process.Pid
	select {
	case <-p.done:
		return nil
	default:
	}
	if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stopping %s: %w", p.name, err)
	}
	select {
	case <-p.done:
	case <-time.After(stopGrace):
		if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("killing %s: %w", p.name, err)
		}
		<-p.done
	}
	// Whatever the leader left in its group goes too.
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("killing %s's process group: %w", p.name, err)
	}
	return nil
}

// waitReady polls url until it answers 200 OK, the process exits, or ctx
// ends.
func (p *process) waitReady(ctx context.Context, client *http.Client, url, token string) error {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		if last = probe(ctx, client, url, token); last == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s %w (%v) before %s answered; output in %s", p.name, errExited, p.err, url, p.logPath)
		case <-ctx.Done():
			return fmt.Errorf("%s not ready at %s: %w (last: %w); output in %s", p.name, url, ctx.Err(), last, p.logPath)
		case <-tick.C:
		}
	}
}

// probe is one GET of url, an error unless it answers 200 OK.
func probe(ctx context.Context, client *http.Client, url, token string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}

// freePorts returns n distinct local ports that were free a moment ago.
// Another process may take one before the server binds it; the server
// then exits and Run reports its log.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
