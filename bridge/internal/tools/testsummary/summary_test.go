package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// A stream of go test -json as cmd/test2json writes it: one package
// passes with a skip, one fails, one has no tests.
const stream = `{"Action":"start","Package":"a"}
{"Action":"run","Package":"a","Test":"TestOK"}
{"Action":"output","Package":"a","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Action":"pass","Package":"a","Test":"TestOK","Elapsed":0.01}
{"Action":"run","Package":"a","Test":"TestNeedsEtcd"}
{"Action":"output","Package":"a","Test":"TestNeedsEtcd","Output":"=== RUN   TestNeedsEtcd\n"}
{"Action":"output","Package":"a","Test":"TestNeedsEtcd","Output":"    a_test.go:12: etcd not on the PATH\n"}
{"Action":"output","Package":"a","Test":"TestNeedsEtcd","Output":"--- SKIP: TestNeedsEtcd (0.00s)\n"}
{"Action":"skip","Package":"a","Test":"TestNeedsEtcd","Elapsed":0}
{"Action":"pass","Package":"a","Elapsed":0.5}
{"Action":"run","Package":"b","Test":"TestBroken"}
{"Action":"output","Package":"b","Test":"TestBroken","Output":"    b_test.go:7: got 1, want 2\n"}
{"Action":"fail","Package":"b","Test":"TestBroken","Elapsed":0.02}
{"Action":"output","Package":"b","Output":"FAIL\n"}
{"Action":"output","Package":"b","Output":"FAIL\tb\t0.100s\n"}
{"Action":"fail","Package":"b","Elapsed":0.1}
{"Action":"skip","Package":"c","Elapsed":0}
`

func TestRun(t *testing.T) {
	var out strings.Builder
	tally := filepath.Join(t.TempDir(), "tally")
	if status := run(strings.NewReader(stream), &out, false, tally); status != 1 {
		t.Errorf("status %d with a failed test, want 1", status)
	}
	for _, want := range []string{
		"ok  \ta\t0.500s", "b_test.go:7: got 1, want 2", "FAIL\tb", "?   \tc\t[no test files]",
		"1 package ok, 1 failed, 1 without tests; 1 test passed, 1 failed, 1 skipped",
		"skipped 1: etcd not on the PATH",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Count(out.String(), "FAIL\tb") != 1 {
		t.Errorf("want one FAIL line for b:\n%s", out.String())
	}
	if strings.Contains(out.String(), "=== RUN   TestOK") {
		t.Errorf("a passing test's output was printed:\n%s", out.String())
	}
	// A second run adds to the tally; -total sums both.
	run(strings.NewReader(stream), &strings.Builder{}, false, tally)
	out.Reset()
	if status := printTotal(&out, tally); status != 0 {
		t.Errorf("printTotal status %d", status)
	}
	if want := "all tests (2 runs): 2 packages ok, 2 failed, 2 without tests; 2 tests passed, 2 failed, 2 skipped\n  skipped 2: etcd not on the PATH"; !strings.Contains(out.String(), want) {
		t.Errorf("total %q, want %q", out.String(), want)
	}
}

// No events at all (go test could not start) is a failure, and its text
// is passed on.
func TestRunWithoutEvents(t *testing.T) {
	var out strings.Builder
	if status := run(strings.NewReader("go: unknown flag -racey\n"), &out, false, ""); status != 1 {
		t.Errorf("status %d, want 1", status)
	}
	if !strings.Contains(out.String(), "go: unknown flag -racey") || !strings.Contains(out.String(), "no test events") {
		t.Errorf("output:\n%s", out.String())
	}
}

// Verbose output carries go test's own package lines: none is added.
func TestRunVerbose(t *testing.T) {
	var out strings.Builder
	in := `{"Action":"output","Package":"a","Output":"ok  \ta\t0.5s\n"}
{"Action":"pass","Package":"a","Elapsed":0.5}
`
	if status := run(strings.NewReader(in), &out, true, ""); status != 0 {
		t.Errorf("status %d", status)
	}
	if strings.Count(out.String(), "ok  \ta") != 1 {
		t.Errorf("want go test's ok line once:\n%s", out.String())
	}
}

// A package that times out sends no end for its running tests: their
// output, which holds the panic and the stacks, is printed, and each
// counts as failed.
func TestRunTimeout(t *testing.T) {
	in := `{"Action":"run","Package":"d","Test":"TestQuick"}
{"Action":"output","Package":"d","Test":"TestQuick","Output":"=== RUN   TestQuick\n"}
{"Action":"pass","Package":"d","Test":"TestQuick","Elapsed":0.01}
{"Action":"run","Package":"d","Test":"TestHang"}
{"Action":"output","Package":"d","Test":"TestHang","Output":"=== RUN   TestHang\n"}
{"Action":"run","Package":"d","Test":"TestHang/sub"}
{"Action":"output","Package":"d","Test":"TestHang/sub","Output":"panic: test timed out after 10m0s\n"}
{"Action":"output","Package":"d","Test":"TestHang/sub","Output":"\td_test.go:9 +0x49\n"}
{"Action":"output","Package":"d","Output":"FAIL\td\t600.015s\n"}
{"Action":"fail","Package":"d","Elapsed":600.016}
{"Action":"run","Package":"e","Test":"TestHang"}
{"Action":"pass","Package":"e","Test":"TestHang","Elapsed":0.01}
{"Action":"pass","Package":"e","Elapsed":0.1}
`
	var out strings.Builder
	if status := run(strings.NewReader(in), &out, false, ""); status != 1 {
		t.Errorf("status %d, want 1", status)
	}
	got := out.String()
	for _, want := range []string{
		"=== RUN   TestHang\n--- UNFINISHED: TestHang\n",
		"panic: test timed out after 10m0s\n\td_test.go:9 +0x49\n--- UNFINISHED: TestHang/sub\nFAIL\td\t600.015s\n",
		"1 package ok, 1 failed, 0 without tests; 2 tests passed, 2 failed, 0 skipped",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "TestQuick") {
		t.Errorf("a passing test's output was printed:\n%s", got)
	}
}
