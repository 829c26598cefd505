package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/cdiexec/cdi/plugins/buildenv"
)

// program is a binary the bench runs; plugin ones are built static and
// stripped, with plugins/buildenv's settings, as `make build` builds the
// plugins.
type program struct {
	pkg    string
	plugin bool
}

func programs() []program {
	return []program{{"./plugins/generic-tty", true}, {"./plugins/endpoint", true}, {"./bridge/cmd/cdi-bridge", false}}
}

// build compiles the programs into dir with `make build`'s flags.
func build(ctx context.Context, root, dir string) error {
	for _, p := range programs() {
		args := []string{"build", "-trimpath", "-o", dir + "/"}
		env := os.Environ()
		if p.plugin {
			args, env = append(args, "-ldflags=-s"), append(env, buildenv.Env()...)
		}
		cmd := exec.CommandContext(ctx, "go", append(args, p.pkg)...)
		cmd.Dir, cmd.Env = root, env
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %w\n%s", p.pkg, err, out)
		}
	}
	return nil
}

// fixtureRoot is the fake host the plugins look at, testdata/root.
func fixtureRoot(root string) string { return filepath.Join(root, "testdata", "root") }
