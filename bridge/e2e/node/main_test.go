package node

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
)

// What TestMain hands the tests: in the namespaces, the layout the outer
// process prepared; outside, why the node cannot run here.
var (
	layout      *Layout
	unavailable error
)

// TestMain runs the tests in the node's namespaces: outside them, it
// builds what the node needs and runs this binary again inside them (see
// RunOutside); inside, it sets the namespaces up (Enter) and runs the
// tests. Where the node cannot run, the tests run here to skip or fail.
func TestMain(m *testing.M) {
	l, inside, err := InsideLayout()
	switch {
	case err != nil:
		fmt.Fprintln(os.Stderr, "node e2e:", err)
		os.Exit(2)
	case inside:
		os.Exit(runInside(m, l))
	}
	progs, err := FindPrograms()
	if err != nil {
		unavailable = err
		os.Exit(m.Run())
	}
	os.Exit(RunOutside(progs))
}

func runInside(m *testing.M, l *Layout) int {
	note, err := Enter(*l)
	if err != nil {
		fmt.Fprintln(os.Stderr, "node e2e: setting up the node's namespaces:", err)
		return 2
	}
	if note != "" {
		fmt.Fprintln(os.Stderr, "node e2e:", note)
	}
	layout = l
	return m.Run()
}

// requireNode skips or fails the test where the node cannot run: it
// fails when the CI environment variable is set, unless the test is not
// run as root (which is how it is run, not what the machine lacks).
func requireNode(t testing.TB) Layout {
	t.Helper()
	switch {
	case layout != nil:
		return *layout
	case errors.Is(unavailable, ErrNotRoot):
		t.Skipf("skipping: %v", unavailable)
	case apitest.MustRun():
		t.Fatalf("%v (the CI environment variable is set, so this is not skipped)", unavailable)
	default:
		t.Skipf("skipping: %v", unavailable)
	}
	return Layout{}
}
