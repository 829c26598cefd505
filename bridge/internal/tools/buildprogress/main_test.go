package main

import (
	"strings"
	"testing"
	"time"
)

func TestFollow(t *testing.T) {
	var in strings.Builder
	for i := range 20 {
		in.WriteString("k8s.io/pkg" + string(rune('a'+i)) + "\n")
	}
	in.WriteString("# k8s.io/broken\nbroken/x.go:3:1: syntax error\n")
	now := time.Unix(0, 0)
	clock := func() time.Time { now = now.Add(time.Second); return now }
	var out strings.Builder
	if err := follow(strings.NewReader(in.String()), &out, "kube-apiserver", 20, clock); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{"kube-apiserver: 2 of at most 20 packages compiled", "kube-apiserver: 20 of at most 20",
		"# k8s.io/broken\n", "broken/x.go:3:1: syntax error\n", "kube-apiserver: 20 packages compiled in"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Count(got, "of at most") != 10 {
		t.Errorf("want ten progress lines:\n%s", got)
	}
	out.Reset()
	if err := follow(strings.NewReader(""), &out, "x", 100, clock); err != nil || out.Len() != 0 {
		t.Errorf("a warm build printed %q, %v", out.String(), err)
	}
}
