package invoke_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/invoke"
	"github.com/cdiexec/cdi/spec/invoke/fakeexec"
)

const versionReply = `{"cdiVersion":"0.1.0","supportedVersions":["0.0.1","0.0.2","0.1.0"]}`

func fakePlugin(replies map[string]fakeexec.Reply) (*invoke.Plugin, *fakeexec.Exec) {
	if _, ok := replies["VERSION"]; !ok {
		replies["VERSION"] = fakeexec.Reply{Stdout: versionReply}
	}
	fe := &fakeexec.Exec{Replies: replies}
	return &invoke.Plugin{Path: "/opt/cdi/bin/fake", Config: testConf(""), Exec: fe}, fe
}

// TestEnvironment checks the exact environment of each command.
func TestEnvironment(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := "PATH=" + os.Getenv("PATH")
	tests := []struct {
		name string
		run  func(*invoke.Plugin) error
		want []string
	}{
		{"add", func(p *invoke.Plugin) error {
			_, err := p.Add(ctx, invoke.AddRequest{Request: mustRequest(t, "tty:2,tty-x:1"), RequestID: "r1", NUMANodes: []int{0, 1}, Devices: []string{"a", "b"}})
			return err
		}, []string{"CDI_COMMAND=ADD", "CDI_VERSION=0.1.0", "CDI_REQUEST=tty:2,tty-x:1", "CDI_REQUEST_ID=r1", "CDI_REQUEST_NUMA_LOCALITY=0,1", "CDI_REQUEST_DEVICES=a,b", path}},
		{"del", func(p *invoke.Plugin) error { return p.Del(ctx, "r1") },
			[]string{"CDI_COMMAND=DEL", "CDI_VERSION=0.1.0", "CDI_REQUEST_ID=r1", path}},
		{"gc nothing valid", func(p *invoke.Plugin) error { _, err := p.GC(ctx, nil); return err },
			[]string{"CDI_COMMAND=GC", "CDI_VERSION=0.1.0", "CDI_VALID_REQUEST_IDS=", path}},
		{"info", func(p *invoke.Plugin) error { _, err := p.Info(ctx); return err },
			[]string{"CDI_COMMAND=INFO", "CDI_VERSION=0.1.0", path}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, fe := fakePlugin(map[string]fakeexec.Reply{
				"ADD":  {Stdout: `{"cdiVersion":"0.1.0","devices":[]}`},
				"DEL":  {},
				"GC":   {Stdout: `{"cdiVersion":"0.1.0","released":[]}`},
				"INFO": {Stdout: `{"cdiVersion":"0.1.0","tty":1}`},
			})
			if err := tt.run(p); err != nil {
				t.Fatal(err)
			}
			calls := fe.Calls()
			if len(calls) != 2 || calls[0].Command() != "VERSION" {
				t.Fatalf("calls = %+v, want VERSION then the command", calls)
			}
			if got := calls[1].Env; !reflect.DeepEqual(got, tt.want) {
				t.Errorf("environment\n got %q\nwant %q", got, tt.want)
			}
			if string(calls[1].Stdin) != string(testConf("")) || calls[1].Path != "/opt/cdi/bin/fake" {
				t.Errorf("stdin %q, path %q", calls[1].Stdin, calls[1].Path)
			}
			if env := calls[0].Env; len(env) != 2 || env[0] != "CDI_COMMAND=VERSION" {
				t.Errorf("VERSION environment = %q", env)
			}
		})
	}
}

func TestVersionCachedOnce(t *testing.T) {
	t.Parallel()
	p, fe := fakePlugin(map[string]fakeexec.Reply{"INFO": {Stdout: `{"cdiVersion":"0.1.0","tty":1}`}})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := p.Info(context.Background()); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	n := 0
	for _, c := range fe.Calls() {
		if c.Command() == "VERSION" {
			n++
		}
	}
	if n != 1 || len(fe.Calls()) != 9 {
		t.Fatalf("%d VERSION calls of %d, want 1 of 9", n, len(fe.Calls()))
	}
}

func TestVersionFailureNotCached(t *testing.T) {
	t.Parallel()
	p, fe := fakePlugin(map[string]fakeexec.Reply{"VERSION": {ExitStatus: 1}})
	for range 2 {
		if _, err := p.Version(context.Background()); !errors.Is(err, invoke.ErrBadOutput) {
			t.Fatalf("Version = %v, want ErrBadOutput", err)
		}
	}
	if len(fe.Calls()) != 2 {
		t.Fatalf("%d calls, want a retry after a failure", len(fe.Calls()))
	}
}

// TestInvalidArguments: nothing is run for arguments the ABNF rejects.
func TestInvalidArguments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	good := mustRequest(t, "tty:1")
	tests := map[string]func(*invoke.Plugin) error{
		"empty request": func(p *invoke.Plugin) error { _, err := p.Add(ctx, invoke.AddRequest{RequestID: "r1"}); return err },
		"zero amount": func(p *invoke.Plugin) error {
			_, err := p.Add(ctx, invoke.AddRequest{Request: spec.Request{{Spec: spec.ResourceSpec{Type: "tty"}}}, RequestID: "r1"})
			return err
		},
		"bad request-id": func(p *invoke.Plugin) error {
			_, err := p.Add(ctx, invoke.AddRequest{Request: good, RequestID: "-x"})
			return err
		},
		"negative numa": func(p *invoke.Plugin) error {
			_, err := p.Add(ctx, invoke.AddRequest{Request: good, RequestID: "r", NUMANodes: []int{-1}})
			return err
		},
		"duplicate device": func(p *invoke.Plugin) error {
			_, err := p.Add(ctx, invoke.AddRequest{Request: good, RequestID: "r", Devices: []string{"a", "a"}})
			return err
		},
		"del bad id":  func(p *invoke.Plugin) error { return p.Del(ctx, "a_b") },
		"gc empty id": func(p *invoke.Plugin) error { _, err := p.GC(ctx, []string{""}); return err },
	}
	for name, run := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p, fe := fakePlugin(map[string]fakeexec.Reply{})
			if err := run(p); !errors.Is(err, spec.ErrMalformed) {
				t.Fatalf("error = %v, want spec.ErrMalformed", err)
			}
			if n := len(fe.Calls()); n != 0 {
				t.Fatalf("%d plugin runs for invalid arguments", n)
			}
		})
	}
}

// TestDecode covers how stdout and the exit status become a result or an error.
func TestDecode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	errDoc := `{"cdiVersion":"0.1.0","code":5,"msg":"Unknown request ID","details":"r9"}`
	info := func(p *invoke.Plugin) error { _, err := p.Info(ctx); return err }
	del := func(p *invoke.Plugin) error { return p.Del(ctx, "r9") }
	tests := []struct {
		name  string
		cmd   string
		reply fakeexec.Reply
		run   func(*invoke.Plugin) error
		want  error // nil: success; *spec.Error: its code
	}{
		{"del success", "DEL", fakeexec.Reply{}, del, nil},
		{"del error exit 0", "DEL", fakeexec.Reply{Stdout: errDoc}, del, &spec.Error{Code: 5}},
		{"del error exit 1", "DEL", fakeexec.Reply{Stdout: errDoc, ExitStatus: 1}, del, &spec.Error{Code: 5}},
		{"del result document", "DEL", fakeexec.Reply{Stdout: `{"cdiVersion":"0.1.0"}`}, del, invoke.ErrBadOutput},
		{"del failing silently", "DEL", fakeexec.Reply{ExitStatus: 1, Stderr: "boom"}, del, invoke.ErrBadOutput},
		{"info error exit 0", "INFO", fakeexec.Reply{Stdout: errDoc}, info, &spec.Error{Code: 5}},
		{"info resource named code", "INFO", fakeexec.Reply{Stdout: `{"cdiVersion":"0.1.0","code":3}`}, info, nil},
		{"code 0 is no error", "INFO", fakeexec.Reply{Stdout: `{"code":0,"msg":"x"}`, ExitStatus: 1}, info, invoke.ErrBadOutput},
		{"failure without code", "INFO", fakeexec.Reply{Stdout: `{"error":3,"message":"x"}`, ExitStatus: 1}, info, invoke.ErrBadOutput},
		{"result with failing exit", "INFO", fakeexec.Reply{Stdout: `{"cdiVersion":"0.1.0","tty":1}`, ExitStatus: 1}, info, invoke.ErrBadOutput},
		{"empty success", "INFO", fakeexec.Reply{}, info, invoke.ErrBadOutput},
		{"missing cdiVersion", "INFO", fakeexec.Reply{Stdout: `{"tty":1}`}, info, invoke.ErrBadOutput},
		{"count not integer", "INFO", fakeexec.Reply{Stdout: `{"cdiVersion":"0.1.0","tty":"1"}`}, info, invoke.ErrBadOutput},
		{"exec error passes", "INFO", fakeexec.Reply{Err: fmt.Errorf("%w: x", invoke.ErrTimeout)}, info, invoke.ErrTimeout},
		{"no supportedVersions", "VERSION", fakeexec.Reply{Stdout: `{"cdiVersion":"0.1.0"}`}, info, invoke.ErrBadOutput},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, _ := fakePlugin(map[string]fakeexec.Reply{tt.cmd: tt.reply})
			err := tt.run(p)
			var want *spec.Error
			switch {
			case tt.want == nil:
				if err != nil {
					t.Fatalf("error = %v, want success", err)
				}
			case errors.As(tt.want, &want):
				if spec.CodeOf(err) != want.Code {
					t.Fatalf("error = %v, want a *spec.Error with code %d", err, want.Code)
				}
			case !errors.Is(err, tt.want) || spec.CodeOf(err) != 0:
				t.Fatalf("error = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestBadOutputQuotesStderr(t *testing.T) {
	t.Parallel()
	p, _ := fakePlugin(map[string]fakeexec.Reply{"INFO": {ExitStatus: 2, Stderr: "panic: runtime error\n"}})
	_, err := p.Info(context.Background())
	if !errors.Is(err, invoke.ErrBadOutput) || !strings.Contains(err.Error(), "panic: runtime error") || !strings.Contains(err.Error(), "status 2") {
		t.Fatalf("error = %v", err)
	}
}
