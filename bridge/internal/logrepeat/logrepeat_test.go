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
	log := timeless(&out)
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

// Each key's failure is its own: one key's repeat is counted while
// another's is logged at once; Warned logs at WARN; and a key forgotten
// by Retain is new again, logged however recently it was.
func TestFailures(t *testing.T) {
	var out strings.Builder
	log := timeless(&out)
	now := time.Unix(0, 0)
	fs := &Failures[string]{Every: time.Minute, Now: func() time.Time { return now }}
	broken := errors.New("broken")
	steps := []struct {
		do   func()
		want string
	}{
		{func() { fs.Of("a.conf").Warned(log, "skipped", broken, "dropIn", "a.conf") }, `level=WARN msg=skipped dropIn=a.conf error=broken`},
		{func() { fs.Of("a.conf").Warned(log, "skipped", broken, "dropIn", "a.conf") }, ""},
		{func() { fs.Of("b.conf").Warned(log, "skipped", broken, "dropIn", "b.conf") }, `level=WARN msg=skipped dropIn=b.conf error=broken`},
		{func() { fs.Retain(func(k string) bool { return k != "a.conf" }) }, ""},
		{func() { fs.Of("b.conf").Warned(log, "skipped", broken, "dropIn", "b.conf") }, ""},
		{func() { fs.Of("a.conf").Warned(log, "skipped", broken, "dropIn", "a.conf") }, `level=WARN msg=skipped dropIn=a.conf error=broken`},
		{func() { fs.Of("a.conf").Succeeded(log, "served", "dropIn", "a.conf") }, `level=INFO msg=served dropIn=a.conf`},
	}
	for i, s := range steps {
		out.Reset()
		s.do()
		if got := strings.TrimSpace(out.String()); got != s.want {
			t.Errorf("step %d: logged %q, want %q", i, got, s.want)
		}
	}
}

// timeless is a text log into out without the time, so that lines can be
// compared.
func timeless(out *strings.Builder) *slog.Logger {
	return slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}))
}
