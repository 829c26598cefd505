// Command testplugin is a skel plugin for the tests of package invoke, of
// cditool and of the bridge's discovery. The "mode" member of its
// configuration's args picks a behaviour: "" behaves; "old" and "v010"
// play a plugin that speaks only the versions up to 0.0.2 and 0.1.0; the
// others misbehave in one particular way (see misbehave and speakOnly).
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/cdiexec/cdi/skel"
	"github.com/cdiexec/cdi/spec"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == "sleep" {
		// The grandchild of the fork modes: it only holds stdout open.
		d, _ := time.ParseDuration(os.Args[2])
		time.Sleep(d)
		return
	}
	stdin, _ := io.ReadAll(io.LimitReader(os.Stdin, spec.MaxConfigSize+1))
	var cfg struct {
		Args struct{ Mode string } `json:"args"`
	}
	_ = json.Unmarshal(stdin, &cfg)
	if versions := modeVersions(cfg.Args.Mode); versions != nil {
		if status, answered := speakOnly(versions); answered {
			os.Exit(status)
		}
	}
	d := skel.Dispatcher{LookupEnv: os.LookupEnv, Stdin: bytes.NewReader(stdin), Stdout: os.Stdout, Stderr: os.Stderr}
	os.Exit(d.Run(skel.Plugin{Info: info, Add: add, Del: del, List: list, GC: gc, Args: []string{"mode", "markDir"}}))
}

// modeVersions are the versions the plugin speaks in the modes that test
// negotiation, oldest first; nil in the others, where skel's are.
func modeVersions(mode string) []string {
	switch mode {
	case "old":
		return []string{spec.Version001, spec.Version002}
	case "v010":
		return []string{spec.Version001, spec.Version002, spec.Version010}
	case "alien":
		return []string{"9.9.9"}
	}
	return nil
}

// speakOnly plays a plugin that speaks only versions: it answers VERSION
// with them, and refuses a CDI_VERSION that is not one of them with code
// 1, as the plugin's own check does before any other (SPEC.md, "Order of
// checks", step 2). It reports whether it answered, and the exit status;
// skel answers the calls in a version it speaks.
func speakOnly(versions []string) (status int, answered bool) {
	command, asked := strings.ToUpper(os.Getenv(spec.EnvCommand)), os.Getenv(spec.EnvVersion)
	newest := versions[len(versions)-1]
	var doc any = spec.VersionResult{CDIVersion: newest, SupportedVersions: versions}
	switch {
	case command == spec.CmdVersion:
	case asked != "" && !slices.Contains(versions, asked):
		e := spec.NewError(spec.CodeIncompatibleVersion, "Unsupported version: %s", asked)
		e.CDIVersion, doc = newest, e
		if command != spec.CmdDel {
			status = 1
		}
	default:
		return 0, false
	}
	out, _ := json.Marshal(doc)
	fmt.Println(string(out))
	return status, true
}

func mode(a *skel.Args) string { return stringArg(a, "mode") }

// stringArg returns args.<name> if it is a string, else "".
func stringArg(a *skel.Args, name string) string {
	var args map[string]any
	_ = json.Unmarshal(a.Config.Args, &args)
	s, _ := args[name].(string)
	return s
}

// misbehave does what a broken plugin does, for the modes that are
// broken, before the command's normal work.
func misbehave(a *skel.Args) {
	fmt.Fprintf(os.Stderr, "testplugin: %s mode=%q\n", a.Command, mode(a))
	switch mode(a) {
	case "hang":
		time.Sleep(time.Hour)
	case "fork":
		grandchild(false, "60s")
		time.Sleep(time.Hour)
	case "escape":
		grandchild(true, "5s")
		time.Sleep(time.Hour)
	case "orphan":
		grandchild(true, "3s")
	case "garbage":
		fmt.Fprintln(os.Stderr, "garbage mode: printing junk")
		fmt.Print("this is not JSON")
		os.Exit(1)
	case "silent":
		fmt.Fprintln(os.Stderr, "silent mode: failing without a document")
		os.Exit(2)
	case "signal":
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Hour)
	case "huge":
		fmt.Print(`{"cdiVersion":"` + a.Version + `","pad":"` + strings.Repeat("x", 17<<20) + `"}`)
		os.Exit(0)
	case "errdoc0":
		fmt.Printf(`{"cdiVersion":%q,"code":100,"msg":"plugin-specific","details":"printed with exit 0"}`+"\n", a.Version)
		os.Exit(0)
	case "wrongversion":
		fmt.Println(`{"cdiVersion":"0.0.1","tty":2}`)
		os.Exit(0)
	case "twodocs":
		fmt.Printf("{\"cdiVersion\":%q,\"tty\":2}\n{}\n", a.Version)
		os.Exit(0)
	}
}

// grandchild starts this binary again as a sleeper that inherits stdout.
// With setsid it leaves the plugin's process group, so killing the group
// does not reach it and only WaitDelay unblocks the caller.
func grandchild(setsid bool, d string) {
	self, err := os.Executable()
	if err != nil {
		panic(err)
	}
	cmd := exec.Command(self, "sleep", d)
	cmd.Stdout = os.Stdout
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: setsid}
	if err := cmd.Start(); err != nil {
		panic(err)
	}
}

func devices(typ string) []spec.DeviceInfo {
	zero := 0
	return []spec.DeviceInfo{
		{ID: typ + "0", Resource: typ, DeviceNodes: []spec.DeviceNode{{HostPath: "/dev/fake0"}}, NUMANode: &zero, Healthy: true, Capacity: 1, Used: 1},
		{ID: typ + "1", Resource: typ, DeviceNodes: []spec.DeviceNode{{HostPath: "/dev/fake1"}}, Healthy: true, Capacity: 2, Shared: true},
	}
}

func info(a *skel.Args) (*spec.InfoResult, error) {
	misbehave(a)
	if mode(a) == "fail" {
		return nil, spec.NewError(spec.CodePluginMin+1, "inventory unavailable")
	}
	return &spec.InfoResult{Counts: map[string]int{a.Config.Type: 2}, Devices: devices(a.Config.Type)}, nil
}

func addResult(a *skel.Args) *spec.AddResult {
	typ := a.Config.Type
	return &spec.AddResult{
		Devices:      []string{"/dev/fake0", "/dev/fake1"},
		NUMALocality: []int{0},
		DeviceNodes:  []spec.DeviceNode{{HostPath: "/dev/fake0", ContainerPath: "/dev/fake0", Permissions: "rw"}, {HostPath: "/dev/fake1", Permissions: "rw"}},
		Env:          map[string]string{"FAKE_DEVICES": typ + "0," + typ + "1"},
		CDIDevices:   []string{"example.com/" + typ + "=" + typ + "0", "example.com/" + typ + "=" + typ + "1"},
		Units:        []spec.Unit{{Resource: typ, Device: typ + "0"}, {Resource: typ, Device: typ + "1"}},
	}
}

func add(a *skel.Args) (*spec.AddResult, error) {
	misbehave(a)
	switch mode(a) {
	case "fail":
		return nil, spec.NewError(spec.CodeInsufficientResources, "asked for %s, 2 free", a.Request)
	case "env":
		// Report the environment the plugin got, to test what callers pass.
		r := &spec.AddResult{Env: map[string]string{}}
		for _, kv := range os.Environ() {
			k, v, _ := strings.Cut(kv, "=")
			r.Env[k] = v
		}
		return r, nil
	}
	if dir := stringArg(a, "markDir"); dir != "" {
		// Leave a trace of the ADD, for tests of when it ran.
		if err := os.WriteFile(filepath.Join(dir, a.RequestID), nil, 0o644); err != nil {
			return nil, spec.NewError(spec.CodeInternal, "%v", err)
		}
	}
	r := addResult(a)
	if len(a.Devices) > 0 {
		r.Env["PINNED"] = strings.Join(a.Devices, ",")
	}
	return r, nil
}

func del(a *skel.Args) error {
	misbehave(a)
	switch a.RequestID {
	case "unknown":
		return spec.NewError(spec.CodeUnknownRequestID, "no allocation for %s", a.RequestID)
	case "broken":
		return spec.NewError(spec.CodeStateError, "state file is corrupt")
	}
	return nil
}

func list(a *skel.Args) (*spec.ListResult, error) {
	misbehave(a)
	created := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	return &spec.ListResult{Allocations: []spec.Allocation{
		{RequestID: "r1", Request: a.Config.Type + ":2", Created: created, Result: *addResult(a)},
	}}, nil
}

func gc(a *skel.Args) (*spec.GCResult, error) {
	misbehave(a)
	valid := map[string]bool{}
	for _, id := range a.ValidRequestIDs {
		valid[id] = true
	}
	released := []string{}
	for _, id := range []string{"r1", "r2"} {
		if !valid[id] {
			released = append(released, id)
		}
	}
	sort.Strings(released)
	return &spec.GCResult{Released: released}, nil
}
