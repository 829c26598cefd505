package invoke

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	cniversion "github.com/containernetworking/cni/pkg/version"

	"github.com/cdiexec/cdi/spec"
)

// DefaultTimeout bounds one plugin run when Plugin.Timeout is zero. It is
// generous: a plugin scans sysfs and takes a file lock, nothing slower.
const DefaultTimeout = 30 * time.Second

// defaultPath is the PATH a plugin gets when the caller has none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Plugin runs the plugin of one drop-in. Set the exported fields before the
// first call and do not copy the value afterwards; its methods are safe for
// concurrent use.
type Plugin struct {
	// Path is the plugin binary.
	Path string
	// Config is the drop-in, piped to the plugin unchanged.
	Config []byte
	// Exec runs the binary; nil means ProcessExec{}.
	Exec Exec
	// Timeout bounds each run of the plugin; 0 means DefaultTimeout and a
	// negative value leaves only ctx to stop it.
	Timeout time.Duration
	// CDIVersion, when set, is sent as CDI_VERSION without asking the
	// plugin, to test a plugin against a particular version.
	CDIVersion string
	// MinVersion, when set, is the oldest version the caller can work
	// with: a plugin whose newest version in common is older is
	// ErrIncompatible, whatever the command (the bridge needs 0.1.0's
	// device inventory).
	MinVersion string
	// Versions, when set, keeps the plugin's VERSION reply for every
	// Plugin of the same binary, while the binary stays the same file
	// (VersionCache); without it this Plugin keeps the reply it got.
	Versions *VersionCache
	// Stderr, when set, receives the plugin's stderr after every run whose
	// error does not already quote it: successes and error documents.
	Stderr io.Writer

	mu      sync.Mutex
	version *spec.VersionResult
}

// NewPlugin returns a Plugin for the drop-in c, whose binary is searched for
// in dirs. The error wraps ErrNotFound when there is no such binary.
func NewPlugin(c *Conf, dirs []string) (*Plugin, error) {
	path, err := FindInPath(c.Plugin, dirs)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.Path, err)
	}
	return &Plugin{Path: path, Config: c.Bytes}, nil
}

// call is one run of the plugin: the command, the CDI_VERSION to send ("" for
// VERSION) and the command's other variables as NAME=value.
type call struct {
	command string
	version string
	params  []string
	// min is the oldest version the call can be made in ("" for any),
	// and needs what needs it, for the error when the plugin is older.
	min, needs string
}

// environ is the complete environment of the plugin. Only the protocol's
// variables and PATH are passed, not the caller's environment: a plugin then
// behaves the same whether the bridge daemon, an operator's shell or a test
// runs it, and it cannot pick up the caller's secrets, locale, proxy or
// LD_*/GO* settings. PATH stays so that plugins can run system helpers.
func (c call) environ() []string {
	env := []string{spec.EnvCommand + "=" + c.command}
	if c.version != "" {
		env = append(env, spec.EnvVersion+"="+c.version)
	}
	env = append(env, c.params...)
	path := os.Getenv("PATH")
	if path == "" {
		path = defaultPath
	}
	return append(env, "PATH="+path)
}

// execFunc starts one run of the plugin for c.
type execFunc func(ctx context.Context, c call) (*Output, error)

// start runs c by Exec.
func (p *Plugin) start(ctx context.Context, c call) (*Output, error) {
	ex := p.Exec
	if ex == nil {
		ex = ProcessExec{}
	}
	return ex.ExecPlugin(ctx, p.Path, p.Config, c.environ())
}

// run executes c and decodes stdout into result (nil for DEL).
func (p *Plugin) run(ctx context.Context, c call, result any) error {
	return p.runWith(ctx, c, result, p.start)
}

// runWith is run with the exec given: under the plugin's timeout, its
// output decoded into result.
func (p *Plugin) runWith(ctx context.Context, c call, result any, exec execFunc) error {
	ctx, cancel := p.withTimeout(ctx)
	defer cancel()
	out, err := exec(ctx, c)
	if err != nil {
		return fmt.Errorf("%s: %w", c.command, err)
	}
	if out == nil {
		out = &Output{} // an Exec that returned nothing: decoded as empty output
	}
	err = decode(p.Path, c, out, result)
	var docErr *spec.Error
	if (err == nil || errors.As(err, &docErr)) && p.Stderr != nil && len(out.Stderr) > 0 {
		_, _ = p.Stderr.Write(out.Stderr) // diagnostics only
	}
	if err != nil && docErr == nil {
		return fmt.Errorf("%s: %w", c.command, err)
	}
	return err
}

func (p *Plugin) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	switch {
	case p.Timeout < 0:
		return context.WithCancel(ctx)
	case p.Timeout == 0:
		return context.WithTimeout(ctx, DefaultTimeout)
	}
	return context.WithTimeout(ctx, p.Timeout)
}

// Version runs VERSION the first time it is called and returns the kept
// reply afterwards: this Plugin's, or with Versions set, the binary's
// while it is the same file. A failure is not kept.
func (p *Plugin) Version(ctx context.Context) (*spec.VersionResult, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.Versions == nil {
		if p.version == nil {
			v, err := p.runVersion(ctx)
			if err != nil {
				return nil, err
			}
			p.version = v
		}
		v := *p.version
		return &v, nil
	}
	// The binary is identified before it runs, so that a reply is never
	// kept under a newer binary than the one that gave it. A binary that
	// cannot be identified is run all the same, and its reply not kept.
	binary, idErr := identify(p.Path)
	if v, ok := p.Versions.get(p.Path, binary); ok && idErr == nil {
		return &v, nil
	}
	v, err := p.runVersion(ctx)
	if err == nil && idErr == nil {
		p.Versions.put(p.Path, binary, *v)
	}
	return v, err
}

// runVersion runs VERSION.
func (p *Plugin) runVersion(ctx context.Context) (*spec.VersionResult, error) {
	var v spec.VersionResult
	if err := p.run(ctx, call{command: spec.CmdVersion}, &v); err != nil {
		return nil, err
	}
	if len(v.SupportedVersions) == 0 {
		return nil, fmt.Errorf("%s: %w: %s lists no supportedVersions", spec.CmdVersion, ErrBadOutput, p.Path)
	}
	return &v, nil
}

// forgetVersion drops the kept VERSION reply, so that the next call asks
// the plugin again.
func (p *Plugin) forgetVersion() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.version = nil
	if p.Versions != nil {
		p.Versions.forget(p.Path)
	}
}

// Negotiate returns the CDI_VERSION this Plugin sends: CDIVersion if set,
// else the newest version both this package and the plugin support,
// which must be MinVersion or newer.
func (p *Plugin) Negotiate(ctx context.Context) (string, error) {
	if p.CDIVersion != "" {
		return p.CDIVersion, nil
	}
	v, err := p.Version(ctx)
	if err != nil {
		return "", err
	}
	best := newest(v.SupportedVersions)
	switch {
	case best == "":
		return "", fmt.Errorf("%w: %s supports %s, this caller %s", ErrIncompatible, p.Path,
			strings.Join(v.SupportedVersions, ", "), strings.Join(spec.SupportedVersions(), ", "))
	case p.MinVersion != "" && !atLeast(best, p.MinVersion):
		return "", fmt.Errorf("%w: %s supports %s; this caller needs %s or newer", ErrIncompatible, p.Path,
			strings.Join(v.SupportedVersions, ", "), p.MinVersion)
	}
	return best, nil
}

// newest returns the newest of theirs that this package supports too, or
// "" when they share none.
func newest(theirs []string) string {
	best := ""
	for _, v := range theirs {
		if spec.IsSupported(v) && (best == "" || atLeast(v, best)) {
			best = v
		}
	}
	return best
}

// atLeast reports whether version v is min or newer, by CNI's version
// package. Its ParseVersion is laxer than the protocol's grammar ("1" is
// 1.0.0, "" is 0.1.0), which does not matter here: newest compares only
// versions this package supports, and a CDIVersion set by hand outside
// the grammar is refused by every plugin (code 1) whatever this says of
// it. The conformance checks, which judge a plugin's versions as given,
// compare with spec's strict parser instead.
func atLeast(v, min string) bool {
	ok, err := cniversion.GreaterThanOrEqualTo(v, min)
	return err == nil && ok
}

// negotiateAtLeast negotiates and fails with ErrIncompatible when the
// version is older than c.min, which c.needs needs.
func (p *Plugin) negotiateAtLeast(ctx context.Context, c call) (string, error) {
	v, err := p.Negotiate(ctx)
	if err != nil {
		return "", err
	}
	if c.min != "" && !atLeast(v, c.min) {
		return "", fmt.Errorf("%w: %s needs protocol %s or newer, %s speaks %s", ErrIncompatible, c.needs, c.min, p.Path, v)
	}
	return v, nil
}

// negotiated runs c in the version negotiated with the plugin, by exec
// (nil: by Exec), its output decoded into result. A plugin that refuses
// that version with code 1 is no longer the one whose VERSION was kept
// (replaced in place, or a wrapper that runs another binary now): it is
// asked VERSION again and, if that gives another version, c is run once
// more in it, by Exec. The refused run changed nothing: a plugin checks
// CDI_VERSION before anything else (SPEC.md, "Order of checks").
func (p *Plugin) negotiated(ctx context.Context, c call, result any, exec execFunc) error {
	if exec == nil {
		exec = p.start
	}
	v, err := p.negotiateAtLeast(ctx, c)
	if err != nil {
		return err
	}
	c.version = v
	err = p.runWith(ctx, c, result, exec)
	if p.CDIVersion != "" || spec.CodeOf(err) != spec.CodeIncompatibleVersion {
		return err
	}
	p.forgetVersion()
	again, againErr := p.negotiateAtLeast(ctx, c)
	switch {
	case againErr != nil:
		return againErr
	case again == v:
		return err
	}
	c.version = again
	return p.run(ctx, c, result)
}

// Info runs INFO: the counts and, from 0.1.0, the device inventory.
func (p *Plugin) Info(ctx context.Context) (*spec.InfoResult, error) {
	var r spec.InfoResult
	if err := p.negotiated(ctx, call{command: spec.CmdInfo}, &r, nil); err != nil {
		return nil, err
	}
	return &r, nil
}

// AddRequest holds the parameters of ADD.
type AddRequest struct {
	Request   spec.Request // CDI_REQUEST
	RequestID string       // CDI_REQUEST_ID
	NUMANodes []int        // CDI_REQUEST_NUMA_LOCALITY, optional
	Devices   []string     // CDI_REQUEST_DEVICES, optional, needs 0.1.0
}

// check validates r against the ABNF before anything is run; errors wrap
// spec.ErrMalformed.
func (r AddRequest) check() error {
	if len(r.Request) == 0 {
		return fmt.Errorf("%w: empty request", spec.ErrMalformed)
	}
	if _, err := spec.ParseRequest(r.Request.String()); err != nil {
		return err
	}
	if err := spec.CheckRequestID(r.RequestID); err != nil {
		return err
	}
	if len(r.NUMANodes) > 0 {
		if _, err := spec.ParseNUMANodes(joinInts(r.NUMANodes)); err != nil {
			return err
		}
	}
	if len(r.Devices) > 0 {
		if _, err := spec.ParseDeviceIDs(strings.Join(r.Devices, ",")); err != nil {
			return err
		}
	}
	return nil
}

func (r AddRequest) params() []string {
	env := []string{spec.EnvRequest + "=" + r.Request.String(), spec.EnvRequestID + "=" + r.RequestID}
	if len(r.NUMANodes) > 0 {
		env = append(env, spec.EnvNUMALocality+"="+joinInts(r.NUMANodes))
	}
	if len(r.Devices) > 0 {
		env = append(env, spec.EnvRequestDevices+"="+strings.Join(r.Devices, ","))
	}
	return env
}

func joinInts(ns []int) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ",")
}

// Add runs ADD. Pinning devices needs protocol 0.1.0.
func (p *Plugin) Add(ctx context.Context, req AddRequest) (*spec.AddResult, error) {
	c, err := addCall(req)
	if err != nil {
		return nil, err
	}
	var r spec.AddResult
	if err := p.negotiated(ctx, c, &r, nil); err != nil {
		return nil, err
	}
	return &r, nil
}

// addCall checks req and returns its call, with the version its
// parameters need.
func addCall(req AddRequest) (call, error) {
	if err := req.check(); err != nil {
		return call{}, err
	}
	c := call{command: spec.CmdAdd, params: req.params()}
	if len(req.Devices) > 0 {
		c.min, c.needs = spec.Version010, spec.EnvRequestDevices
	}
	return c, nil
}

// AddAfter is Add with the plugin started at once but given its input
// only when ready yields nil, so that its start-up overlaps what the
// caller must finish first; an error from ready stops it unread and is
// returned wrapped with ErrNotRun. With an Exec that cannot start early
// (not an ExecAfter), it waits for ready, then runs Add.
func (p *Plugin) AddAfter(ctx context.Context, req AddRequest, ready <-chan error) (*spec.AddResult, error) {
	ex, ok := p.Exec.(ExecAfter)
	if p.Exec == nil {
		ex, ok = ProcessExec{}, true
	}
	if !ok {
		if err := <-ready; err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrNotRun, p.Path, err)
		}
		return p.Add(ctx, req)
	}
	c, err := addCall(req)
	if err != nil {
		return nil, err
	}
	var r spec.AddResult
	err = p.negotiated(ctx, c, &r, func(ctx context.Context, c call) (*Output, error) {
		return ex.ExecPluginAfter(ctx, p.Path, p.Config, c.environ(), ready)
	})
	if err != nil {
		return nil, err
	}
	return &r, nil
}

// Del runs DEL. The plugin exits 0 even when it fails, so an error document
// it prints is what tells: it is returned as a *spec.Error, e.g. code 5 for
// a request-id it does not know.
func (p *Plugin) Del(ctx context.Context, requestID string) error {
	if err := spec.CheckRequestID(requestID); err != nil {
		return err
	}
	return p.negotiated(ctx, call{command: spec.CmdDel, params: []string{spec.EnvRequestID + "=" + requestID}}, nil, nil)
}

// List runs LIST, which needs protocol 0.1.0.
func (p *Plugin) List(ctx context.Context) (*spec.ListResult, error) {
	var r spec.ListResult
	if err := p.negotiated(ctx, call{command: spec.CmdList, min: spec.Version010, needs: spec.CmdList}, &r, nil); err != nil {
		return nil, err
	}
	return &r, nil
}

// GC runs GC, which needs protocol 0.1.0: the plugin releases every
// allocation whose request-id is not in valid. An empty valid releases all.
func (p *Plugin) GC(ctx context.Context, valid []string) (*spec.GCResult, error) {
	for _, id := range valid {
		// One by one: [""] joins to "", which would mean "nothing is valid".
		if err := spec.CheckRequestID(id); err != nil {
			return nil, err
		}
	}
	var r spec.GCResult
	c := call{command: spec.CmdGC, params: []string{spec.EnvValidRequestIDs + "=" + strings.Join(valid, ",")}, min: spec.Version010, needs: spec.CmdGC}
	if err := p.negotiated(ctx, c, &r, nil); err != nil {
		return nil, err
	}
	return &r, nil
}
