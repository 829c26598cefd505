package main

import (
	"testing"

	"github.com/cdiexec/cdi/plugins/exectest"
)

// binDir holds cditool, the test plugin of package invoke and the
// generic-tty plugin, built once.
var binDir string

func TestMain(m *testing.M) {
	exectest.MainDir(m, &binDir, ".", "../../invoke/testdata/testplugin", "../../../plugins/generic-tty")
}
