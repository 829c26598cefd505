package logrepeat

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestFailure(t *testing.T) {
	var out strings.Builder
	log := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}))
	now := time.Unix(0, 0)
	f := &Failure{Every: time.Minute, Now: func() time.Time { return now }}
	down := errors.New("kubelet down")
	steps := []struct {
		at   time.Duration
		fail error // nil: a success
		want string
	}{
		{0, nil, ""}, // no failure before: nothing to say
		{0, down, `level=ERROR msg=pass error="kubelet down"`},
		{10 * time.Second, down, ""},
		{50 * time.Second, down, ""},
		{61 * time.Second, down, `level=ERROR msg=pass error="kubelet down" repeatedSinceLastLog=2`},
		{62 * time.Second, errors.New("other"), `level=ERROR msg=pass error=other`},
		{63 * time.Second, nil, `level=INFO msg=recovered`},
		{64 * time.Second, nil, ""},
		{65 * time.Second, down, `level=ERROR msg=pass error="kubelet down"`},
	}
	for i, s := range steps {
		out.Reset()
		now = time.Unix(0, 0).Add(s.at)
		if s.fail != nil {
			f.Failed(log, "pass", s.fail)
		} else {
			f.Succeeded(log, "recovered")
		}
		if got := strings.TrimSpace(out.String()); got != s.want {
			t.Errorf("step %d at %v: logged %q, want %q", i, s.at, got, s.want)
		}
	}
}
