package drafront

import (
	"fmt"
	"testing"

	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/spec/invoke"
)

func TestSplit(t *testing.T) {
	tty := &invoke.Conf{Path: "/etc/cdi/tty.d/generic.conf"}
	dev := &invoke.Conf{Path: "/etc/cdi/dev.d/generic.conf"}
	pools := []discovery.Pool{
		{Name: "tty-generic", Conf: tty}, {Name: "dev-serial-generic", Conf: dev}, {Name: "dev-video-generic", Conf: dev},
	}
	for _, tc := range []struct {
		flag          string
		devicePlugins string
		dra           string
	}{
		{"", "[tty-generic dev-serial-generic dev-video-generic]", "[]"},
		{"tty-generic", "[dev-serial-generic dev-video-generic]", "[tty-generic]"},
		// A pool takes its drop-in's other pools: they share one state.
		{"dev-video-generic", "[tty-generic]", "[dev-serial-generic dev-video-generic]"},
		{" tty-generic , nothing-here,", "[dev-serial-generic dev-video-generic]", "[tty-generic]"},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			dp, viaDRA := Split(pools, ParsePools(tc.flag))
			if got := fmt.Sprint(names(dp)); got != tc.devicePlugins {
				t.Errorf("device plugins %s, want %s", got, tc.devicePlugins)
			}
			if got := fmt.Sprint(names(viaDRA)); got != tc.dra {
				t.Errorf("DRA %s, want %s", got, tc.dra)
			}
		})
	}
}

func names(pools []discovery.Pool) []string {
	out := []string{}
	for _, p := range pools {
		out = append(out, p.Name)
	}
	return out
}
