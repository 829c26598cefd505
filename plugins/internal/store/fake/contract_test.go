package fake_test

import (
	"testing"

	"github.com/cdiexec/cdi/plugins/internal/store"
	"github.com/cdiexec/cdi/plugins/internal/store/fake"
	"github.com/cdiexec/cdi/plugins/internal/store/storetest"
)

func TestContract(t *testing.T) {
	storetest.Run(t, func(*testing.T) storetest.Opener {
		mem := fake.New("")
		return func(bootID string) store.Store { return mem.WithBootID(bootID) }
	})
}
