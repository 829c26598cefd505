package main

import (
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cdiexec/cdi/plugins/exectest"
)

// TestWhatPluginsRefuseIsShown: once a drop-in with a misspelt arg and
// one whose plugin skips devices are added beside the served one, the
// running bridge lists the first on /readyz and in
// cdi_bridge_dropins_skipped, exports the second's skipped devices by
// reason in cdi_bridge_devices_skipped and logs the change, all from the
// real plugins' answers.
func TestWhatPluginsRefuseIsShown(t *testing.T) {
	b := startBridge(t)
	var addr string
	select {
	case addr = <-b.addr:
	case <-time.After(wait):
		t.Fatal("the bridge never logged its metrics address")
	}
	confDir := b.cmd.Args[slices.Index(b.cmd.Args, "--conf-dir")+1]
	typo := dropIn(t, confDir, "tty", "typo", "generic-tty", map[string]any{"root": exectest.FixtureRoot(t), "stateDir": exectest.StateDir(t), "num_system_reservd": 20})
	odd := dropIn(t, confDir, "dev", "odd", "generic", map[string]any{"root": exectest.SkippingRoot(t, 1), "stateDir": exectest.StateDir(t),
		"groups": []any{map[string]any{"name": "serial", "paths": []string{"/dev/ttyUSB*"}}}})

	skipped := series{"cdi_bridge_dropins_skipped", nil}
	badPath := series{"cdi_bridge_devices_skipped", map[string]string{"drop_in": odd, "reason": "bad-path"}}
	outside := series{"cdi_bridge_devices_skipped", map[string]string{"drop_in": odd, "reason": "outside-root"}}
	var body string
	for deadline := time.Now().Add(wait); ; time.Sleep(50 * time.Millisecond) {
		body = get(t, "http://"+addr+"/readyz")
		fams := scrape(t, addr)
		if strings.Contains(body, "skipped drop-in "+typo+": INFO failed") && skipped.value(fams) == 1 &&
			badPath.value(fams) == 1 && outside.value(fams) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz:\n%s\n%s %v, %s %v, %s %v", body, skipped, skipped.value(fams), badPath, badPath.value(fams), outside, outside.value(fams))
		}
	}
	if !strings.Contains(body, `"num_system_reservd" (did you mean "num_system_reserved"?)`) {
		t.Errorf("/readyz does not name the misspelt arg:\n%s", body)
	}
	if recs := b.log.records("devices the plugin skips changed; it says which and why on stderr (debug)"); len(recs) != 1 || recs[0]["dropIn"] != odd {
		t.Errorf("change records %v, want one for %s", recs, odd)
	}
}

// dropIn writes the drop-in <confDir>/<typ>.d/<name>.conf and returns
// its path.
func dropIn(t *testing.T, confDir, typ, name, plugin string, args map[string]any) string {
	t.Helper()
	rel := filepath.Join(typ+".d", name+".conf")
	writeDropIn(t, confDir, rel, map[string]any{"cdiVersion": "0.1.0", "name": name, "type": typ, "plugin": plugin, "args": args})
	return filepath.Join(confDir, rel)
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}
