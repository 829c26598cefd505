package main

import (
	"errors"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/cdiexec/cdi/plugins/internal/engine"
	"github.com/cdiexec/cdi/spec"
)

// defaultReserved keeps tty0 (the active console) through tty12 for the
// system, the draft's example; a node with more gettys raises it.
const defaultReserved = 12

// argReserved is the plugin's one arg, named as in the CDI draft.
const argReserved = "num_system_reserved"

func family() engine.Family {
	return engine.Family{Name: "generic-tty", Types: []string{"tty"}, Args: []string{argReserved}, Discover: discover}
}

// discover lists /dev/ttyN under root with N above num_system_reserved, in
// numeric order. /dev/tty itself and serial ports (ttyS0, ttyUSB0) are not
// virtual terminals and never match.
func discover(h *engine.Host) (*engine.Inventory, error) {
	reserved, err := reservedArg(h.Config)
	if err != nil {
		return nil, err
	}
	rs := spec.ResourceSpec{Type: h.Config.Type}
	inv := &engine.Inventory{Resources: []spec.ResourceSpec{rs}}
	entries, err := fs.ReadDir(h.FS, "dev")
	if errors.Is(err, fs.ErrNotExist) {
		return inv, nil
	}
	if err != nil {
		return nil, err
	}
	var numbers []int
	for _, e := range entries {
		n, ok := ttyNumber(e.Name())
		if ok && n > reserved && !e.IsDir() {
			numbers = append(numbers, n)
		}
	}
	sort.Ints(numbers)
	inv.Devices = make([]engine.Device, 0, len(numbers))
	for _, n := range numbers {
		name := "tty" + strconv.Itoa(n)
		d := engine.Device{ID: name, Resource: rs, Healthy: true, Nodes: []spec.DeviceNode{{HostPath: "/dev/" + name}}}
		if !h.SkipProperties { // an ADD shows none: a map per terminal saved
			d.Properties = map[string]string{"terminal": strconv.Itoa(n)}
		}
		inv.Devices = append(inv.Devices, d)
	}
	return inv, nil
}

// ttyNumber parses "tty<N>" with a canonical decimal N.
func ttyNumber(name string) (int, bool) {
	digits, ok := strings.CutPrefix(name, "tty")
	if !ok || digits == "" || (len(digits) > 1 && digits[0] == '0') || strings.Trim(digits, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.Atoi(digits)
	return n, err == nil && n >= 0
}

// reservedArg reads num_system_reserved: the highest terminal the system
// keeps, up to 2^20.
func reservedArg(cfg *spec.Config) (int, error) {
	reserved := defaultReserved
	err := engine.ReadArgs(cfg, engine.Int(argReserved, &reserved, engine.Between(0, 1<<20)))
	return reserved, err
}
