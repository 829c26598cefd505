package skel

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/buildinfo"
	"github.com/cdiexec/cdi/spec/jsonwrite"
)

// Args is what a callback receives: the negotiated version, the checked
// configuration and the parsed parameters of its command.
type Args struct {
	Command string
	// Version is the protocol version of this call; results are written in it.
	Version string
	Config  *spec.Config
	// Request and RequestID are set for ADD; RequestID also for DEL.
	Request   spec.Request
	RequestID string
	// NUMANodes is CDI_REQUEST_NUMA_LOCALITY, nil when unset (ADD).
	NUMANodes []int
	// Devices is CDI_REQUEST_DEVICES, nil when unset (ADD, 0.1.0).
	Devices []string
	// ValidRequestIDs is CDI_VALID_REQUEST_IDS (GC).
	ValidRequestIDs []string
	// Stderr is where a plugin logs; stdout belongs to the protocol.
	Stderr io.Writer
}

// Plugin holds a plugin's callbacks, one per command. A nil callback is an
// unsupported command (code 3). Errors should be *spec.Error; any other
// error is reported as code 14 with its text as details.
type Plugin struct {
	Info func(*Args) (*spec.InfoResult, error)
	Add  func(*Args) (*spec.AddResult, error)
	Del  func(*Args) error
	List func(*Args) (*spec.ListResult, error)
	GC   func(*Args) (*spec.GCResult, error)

	// Types lists the resource-types the plugin serves; a configuration of
	// another type is code 9. Empty means any type.
	Types []string

	// Args lists the members of a configuration's args the plugin knows,
	// those it reads and any it deliberately passes on; any other member
	// is code 15, naming it (SPEC.md, "Order of checks", step 9). A plugin
	// that takes no args leaves it empty, and every args member is then
	// refused.
	Args []string

	// Serves, when set, lists the resource-specs the configuration serves.
	// It is called only for an ADD whose parameters are malformed (code 7)
	// while CDI_REQUEST's resource-specs are well-formed: naming one the
	// configuration does not serve is then code 4, because resource-specs
	// are checked before amounts (SPEC.md, "Order of checks"). So the CDI
	// draft's "gpu:1,gpu-memory:2048Mi" gets the draft's code 4, while
	// "gpu:2048Mi" stays code 7. Without Serves, code 7 stands.
	Serves func(*Args) ([]spec.ResourceSpec, error)
}

// Dispatcher runs a Plugin against an environment and standard streams.
// Tests inject their own; Main uses the process's.
type Dispatcher struct {
	LookupEnv func(string) (string, bool)
	Stdin     io.Reader
	Stdout    io.Writer
	Stderr    io.Writer
}

// Main runs p with the process's environment and streams and exits with the
// status the protocol prescribes.
func Main(p Plugin) {
	growStack()
	d := Dispatcher{LookupEnv: os.LookupEnv, Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}
	os.Exit(d.Run(p))
}

// growStack grows the goroutine's stack, once and while it is shallow,
// to the 16 KiB a call needs. A goroutine starts with 2 KiB and the
// runtime doubles its stack whenever a call would overflow it, copying
// every frame, each found through the PC tables, into fresh pages; a
// plugin's call reads its JSON documents and writes its state by
// recursion, one level at a time, and so grew its stack twice (to 8 and
// then 16 KiB) at its deepest, each time copying some forty frames. A
// frame this large makes the runtime grow the stack to 16 KiB at once,
// here, where there are a few frames to copy. The pages it zeroes are
// the ones the deep calls write later anyway.
//
//go:noinline
func growStack() {
	var frame [12 << 10]byte
	keep(frame[:])
}

// keep keeps growStack's frame from being optimized away.
//
//go:noinline
func keep([]byte) {}

// Run dispatches one command and returns the exit status: 0 on success, 1 on
// error, and always 0 for DEL.
func (d *Dispatcher) Run(p Plugin) int {
	cmd := upperASCII(d.getenv(spec.EnvCommand))
	if cmd == spec.CmdVersion {
		return d.write(spec.VersionResult{CDIVersion: spec.Current, SupportedVersions: spec.SupportedVersions(),
			PluginVersion: buildinfo.Version()}, 0)
	}
	stdin, readErr := io.ReadAll(io.LimitReader(d.Stdin, spec.MaxConfigSize+1))
	version := d.errorVersion(stdin)
	result, err := d.dispatch(&p, cmd, stdin, readErr)
	if err != nil {
		return d.writeError(version, err, exitStatus(cmd, 1))
	}
	if result == nil {
		return 0 // DEL: success prints nothing
	}
	return d.write(result, 0)
}

// upperASCII upper-cases the ASCII letters of s alone. Commands are ASCII
// words, and Unicode case mapping would take "ınfo" (dotless i) for INFO
// and "LIſT" (long s) for LIST.
func upperASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

// errorVersion picks the version an error document is written in: the
// caller's CDI_VERSION if supported, else the configuration's, else ours.
func (d *Dispatcher) errorVersion(stdin []byte) string {
	if v := d.getenv(spec.EnvVersion); spec.IsSupported(v) {
		return v
	}
	if v := spec.PeekVersion(stdin); spec.IsSupported(v) {
		return v
	}
	return spec.Current
}

func exitStatus(cmd string, status int) int {
	if cmd == spec.CmdDel {
		return 0
	}
	return status
}

// dispatch checks everything in the order SPEC.md gives and runs the
// callback. It returns the result document to print.
func (d *Dispatcher) dispatch(p *Plugin, cmd string, stdin []byte, readErr error) (jsonDocument, error) {
	if v, ok := d.LookupEnv(spec.EnvVersion); ok && v != "" && !spec.IsSupported(v) {
		return nil, spec.NewError(spec.CodeIncompatibleVersion, "Unsupported version: %s", v)
	}
	cs, err := d.lookupCommand(p, cmd)
	if err != nil {
		return nil, err
	}
	if readErr != nil {
		return nil, spec.NewError(spec.CodeInvalidConfig, "reading stdin: %w", readErr)
	}
	cfg, err := checkConfig(p, stdin)
	if err != nil {
		return nil, err
	}
	args := &Args{Command: cmd, Version: d.getenv(spec.EnvVersion), Config: cfg, Stderr: d.Stderr}
	if args.Version == "" {
		args.Version = cfg.CDIVersion // INFO only: CDI_VERSION is optional there
	}
	if cs.minVersion != "" && !spec.AtLeast(args.Version, cs.minVersion) {
		return nil, spec.NewError(spec.CodeUnsupportedCommand, "%s needs cdiVersion %s or newer, the call uses %s", cmd, cs.minVersion, args.Version)
	}
	if err := d.parseParams(cmd, args); err != nil {
		return nil, d.unservedFirst(p, cmd, args, err)
	}
	return safeCall(func() (jsonDocument, error) { return cs.run(p, args) })
}

// unservedFirst returns code 4 instead of invalid, the code 7 error of an
// ADD, when CDI_REQUEST names a resource-spec that p.Serves does not list,
// the first such in request order. Otherwise, and when Serves is unset or
// fails, invalid stands: the malformed parameters are certain.
func (d *Dispatcher) unservedFirst(p *Plugin, cmd string, args *Args, invalid error) error {
	if cmd != spec.CmdAdd || p.Serves == nil {
		return invalid
	}
	specs, err := spec.RequestSpecs(d.getenv(spec.EnvRequest))
	if err != nil {
		return invalid
	}
	served, err := safeCall(func() ([]spec.ResourceSpec, error) { return p.Serves(args) })
	if err != nil {
		return invalid
	}
	for _, rs := range specs {
		if !slices.Contains(served, rs) {
			return spec.NewError(spec.CodeUnsupportedResource, "Unsupported resource-spec: %s", rs)
		}
	}
	return invalid
}

// safeCall runs a plugin's callback, turning a panic into code 14.
func safeCall[R any](f func() (R, error)) (result R, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = spec.NewError(spec.CodeInternal, "plugin panicked: %v\n%s", r, debug.Stack())
		}
	}()
	return f()
}

func checkConfig(p *Plugin, stdin []byte) (*spec.Config, error) {
	cfg, err := spec.ParseConfig(stdin)
	if err != nil {
		return nil, spec.WrapError(spec.CodeInvalidConfig, err)
	}
	if !spec.IsSupported(cfg.CDIVersion) {
		return nil, spec.NewError(spec.CodeIncompatibleConfigVersion, "Unsupported config version: %s", cfg.CDIVersion)
	}
	if len(p.Types) > 0 && !contains(p.Types, cfg.Type) {
		return nil, spec.NewError(spec.CodeTypeMismatch, "configuration type %q is not served by this plugin (it serves %s)", cfg.Type, strings.Join(p.Types, ", "))
	}
	if err := spec.CheckArgs(cfg, p.Args); err != nil {
		return nil, err
	}
	return cfg, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func (d *Dispatcher) getenv(name string) string {
	v, _ := d.LookupEnv(name)
	return v
}

func (d *Dispatcher) write(doc jsonDocument, status int) int {
	// The document is built in memory first, so that a failed write is the
	// only way to leave half of one on stdout. <, > and & stay as they
	// are: the reader is a runtime, not a browser.
	// jsonwrite rather than encoding/json: see package jsonwrite.
	out, err := jsonwrite.MarshalIndent(doc, "  ")
	if err != nil {
		fmt.Fprintf(d.Stderr, "encoding result: %v\n", err)
		return 1
	}
	if _, err := d.Stdout.Write(out); err != nil {
		fmt.Fprintf(d.Stderr, "writing result: %v\n", err)
		return 1
	}
	return status
}

// jsonDocument is every document skel writes: the spec's results and
// errors, each written as its json tags say.
type jsonDocument = any

func (d *Dispatcher) writeError(version string, err error, status int) int {
	var e *spec.Error
	if !errors.As(err, &e) {
		e = spec.WrapError(spec.CodeInternal, err)
	}
	doc := *e
	doc.CDIVersion = version
	if doc.Msg == "" {
		doc.Msg = doc.Code.Message()
	}
	return d.write(&doc, status)
}
