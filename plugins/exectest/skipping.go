package exectest

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// SkippingRoot returns a root whose dev holds ttyUSB0, an empty file that
// stands for a device node under a root other than "/", and n devices of
// each kind a plugin must skip, for a group matching /dev/ttyUSB*: a name
// with a newline (ttyUSB1\nforged line, a skip-reason of bad-path), a link
// out of the root (ttyUSB2, to /dev/null: outside-root), a FIFO (ttyUSB3:
// not-device-node) and a name too long for a device id, with a newline in
// it too (ttyUSB4\naaa...: bad-id, which the generic plugin finds before
// the path). The i-th device of a kind has i "x" appended to its name.
func SkippingRoot(t testing.TB, n int) string {
	t.Helper()
	dev := filepath.Join(t.TempDir(), "dev")
	if err := os.Mkdir(dev, 0o755); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dev, "ttyUSB0"), nil, 0o644))
	for i := range n {
		x := strings.Repeat("x", i)
		must(os.WriteFile(filepath.Join(dev, "ttyUSB1\nforged line"+x), nil, 0o644))
		must(os.Symlink("/dev/null", filepath.Join(dev, "ttyUSB2"+x)))
		must(syscall.Mkfifo(filepath.Join(dev, "ttyUSB3"+x), 0o644))
		must(os.WriteFile(filepath.Join(dev, "ttyUSB4\n"+strings.Repeat("a", 120)+x), nil, 0o644))
	}
	return filepath.Dir(dev)
}
