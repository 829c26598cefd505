package bench

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/cdiexec/cdi/internal/gobuild"
)

// programs are the binaries the bench runs.
func programs() []string {
	return []string{"./plugins/generic-tty", "./plugins/endpoint", "./bridge/cmd/cdi-bridge"}
}

// build compiles the programs into dir as `make build` compiles them
// (internal/gobuild).
func build(ctx context.Context, root, dir string) error {
	cmd := gobuild.Command(ctx, root, dir+"/", programs()...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %v: %w\n%s", programs(), err, out)
	}
	return nil
}

// fixtureRoot is the fake host the plugins look at, testdata/root.
func fixtureRoot(root string) string { return filepath.Join(root, "testdata", "root") }
