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

// run executes c and decodes stdout into result (nil for DEL).
func (p *Plugin) run(ctx context.Context, c call, result any) error {
	ex := p.Exec
	if ex == nil {
		ex = ProcessExec{}
	}
	return p.runWith(ctx, c, result, func(ctx context.Context) (*Output, error) {
		return ex.ExecPlugin(ctx, p.Path, p.Config, c.environ())
	})
}

// runWith is run with the exec given: under the plugin's timeout, its
// output decoded into result.
func (p *Plugin) runWith(ctx context.Context, c call, result any, exec func(context.Context) (*Output, error)) error {
	ctx, cancel := p.withTimeout(ctx)
	defer cancel()
	out, err := exec(ctx)
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

// Version runs VERSION the first time it is called and returns the cached
// reply afterwards. A failure is not cached.
func (p *Plugin) Version(ctx context.Context) (*spec.VersionResult, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.version != nil {
		v := *p.version
		return &v, nil
	}
	var v spec.VersionResult
	if err := p.run(ctx, call{command: spec.CmdVersion}, &v); err != nil {
		return nil, err
	}
	if len(v.SupportedVersions) == 0 {
		return nil, fmt.Errorf("%s: %w: %s lists no supportedVersions", spec.CmdVersion, ErrBadOutput, p.Path)
	}
	p.version = &v
	out := v
	return &out, nil
}

// Negotiate returns the CDI_VERSION this Plugin sends: CDIVersion if set,
// else the newest version both this package and the plugin support.
func (p *Plugin) Negotiate(ctx context.Context) (string, error) {
	if p.CDIVersion != "" {
		return p.CDIVersion, nil
	}
	v, err := p.Version(ctx)
	if err != nil {
		return "", err
	}
	best := newest(v.SupportedVersions)
	if best == "" {
		return "", fmt.Errorf("%w: %s supports %s, this caller %s", ErrIncompatible, p.Path,
			strings.Join(v.SupportedVersions, ", "), strings.Join(spec.SupportedVersions(), ", "))
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
// version is older than min, which what needs says needs.
func (p *Plugin) negotiateAtLeast(ctx context.Context, min, needs string) (string, error) {
	v, err := p.Negotiate(ctx)
	if err != nil {
		return "", err
	}
	if !atLeast(v, min) {
		return "", fmt.Errorf("%w: %s needs protocol %s or newer, %s speaks %s", ErrIncompatible, needs, min, p.Path, v)
	}
	return v, nil
}

// Info runs INFO: the counts and, from 0.1.0, the device inventory.
func (p *Plugin) Info(ctx context.Context) (*spec.InfoResult, error) {
	v, err := p.Negotiate(ctx)
	if err != nil {
		return nil, err
	}
	var r spec.InfoResult
	if err := p.run(ctx, call{command: spec.CmdInfo, version: v}, &r); err != nil {
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
	c, err := p.addCall(ctx, req)
	if err != nil {
		return nil, err
	}
	var r spec.AddResult
	if err := p.run(ctx, c, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// addCall checks req and negotiates the version its parameters need.
func (p *Plugin) addCall(ctx context.Context, req AddRequest) (call, error) {
	if err := req.check(); err != nil {
		return call{}, err
	}
	min := spec.Version001
	if len(req.Devices) > 0 {
		min = spec.Version010
	}
	v, err := p.negotiateAtLeast(ctx, min, spec.EnvRequestDevices)
	if err != nil {
		return call{}, err
	}
	return call{command: spec.CmdAdd, version: v, params: req.params()}, nil
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
	c, err := p.addCall(ctx, req)
	if err != nil {
		return nil, err
	}
	var r spec.AddResult
	err = p.runWith(ctx, c, &r, func(ctx context.Context) (*Output, error) {
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
	v, err := p.Negotiate(ctx)
	if err != nil {
		return err
	}
	return p.run(ctx, call{command: spec.CmdDel, version: v, params: []string{spec.EnvRequestID + "=" + requestID}}, nil)
}

// List runs LIST, which needs protocol 0.1.0.
func (p *Plugin) List(ctx context.Context) (*spec.ListResult, error) {
	v, err := p.negotiateAtLeast(ctx, spec.Version010, spec.CmdList)
	if err != nil {
		return nil, err
	}
	var r spec.ListResult
	if err := p.run(ctx, call{command: spec.CmdList, version: v}, &r); err != nil {
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
	v, err := p.negotiateAtLeast(ctx, spec.Version010, spec.CmdGC)
	if err != nil {
		return nil, err
	}
	var r spec.GCResult
	params := []string{spec.EnvValidRequestIDs + "=" + strings.Join(valid, ",")}
	if err := p.run(ctx, call{command: spec.CmdGC, version: v, params: params}, &r); err != nil {
		return nil, err
	}
	return &r, nil
}
