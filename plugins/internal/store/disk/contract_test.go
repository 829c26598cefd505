package disk_test

import (
	"testing"

	"github.com/cdiexec/cdi/plugins/internal/store"
	"github.com/cdiexec/cdi/plugins/internal/store/disk"
	"github.com/cdiexec/cdi/plugins/internal/store/storetest"
)

func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Opener {
		path := disk.StatePath(t.TempDir(), "tty", "generic-tty")
		return func(bootID string) store.Store { return disk.New(path, bootID) }
	})
}
