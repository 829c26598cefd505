package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Plugin is the device plugin of one resource. Set the fields, then Run.
type Plugin struct {
	// ResourceName is the extended resource, e.g. cdi.example.com/gpu-drm.
	ResourceName string
	// Dir is the kubelet's device-plugin directory, holding kubelet.sock.
	Dir     string
	Handler Handler
	// Preferred advertises GetPreferredAllocation.
	Preferred bool
	Logger    *slog.Logger
	// PollInterval is how often kubelet.sock, our socket and our streams
	// are checked (default 1 s).
	PollInterval time.Duration
	// StreamGrace is how long the plugin waits, after the kubelet closed
	// its last ListAndWatch stream, for a new one before registering again
	// (default 5 s).
	StreamGrace time.Duration
	// OnRegister, if set, is told of every registration attempt.
	OnRegister func(resource string, err error)
}

// errReregister ends one registration so that Run starts another.
var errReregister = errors.New("registration lost")

// Run serves and registers until ctx ends, registering again whenever the
// kubelet forgets the plugin, and backing off after failures.
func (p *Plugin) Run(ctx context.Context) error {
	backoff := 100 * time.Millisecond
	for {
		err := p.registration(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, errReregister) {
			p.log().Info("registering again", "resource", p.ResourceName, "reason", err)
			backoff = 100 * time.Millisecond
			continue
		}
		p.log().Error("device plugin registration failed", "resource", p.ResourceName, "error", err, "retryIn", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

// registration is one socket, one server and one Register call; it
// returns when ctx ends or the registration is lost.
func (p *Plugin) registration(ctx context.Context) error {
	sock := filepath.Join(p.Dir, SocketName(p.ResourceName, time.Now()))
	_ = os.Remove(sock)
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", sock, err)
	}
	// The socket's mode comes from the process umask (0777 under umask
	// 000); only the kubelet, which runs as root, has to connect.
	if err := os.Chmod(sock, SocketMode); err != nil {
		_ = lis.Close()
		return fmt.Errorf("socket %s: %w", sock, err)
	}
	srv := newServer(p.Handler, p.Preferred)
	g := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(g, srv)
	go func() { _ = g.Serve(lis) }()
	defer p.shutdown(g, srv, sock)
	kubelet, err := os.Stat(filepath.Join(p.Dir, "kubelet.sock"))
	if err != nil {
		err = fmt.Errorf("kubelet not there: %w", err)
		if p.OnRegister != nil {
			p.OnRegister(p.ResourceName, err)
		}
		return err
	}
	err = p.register(ctx, filepath.Base(sock))
	if p.OnRegister != nil {
		p.OnRegister(p.ResourceName, err)
	}
	if err != nil {
		return err
	}
	p.log().Info("registered with the kubelet", "resource", p.ResourceName, "socket", sock)
	return p.watch(ctx, sock, kubelet, srv)
}

// shutdown sends empty lists on the open streams, lets running calls
// finish (for a while) and removes the socket.
func (p *Plugin) shutdown(g *grpc.Server, srv *server, sock string) {
	close(srv.done)
	stopped := make(chan struct{})
	go func() { g.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		g.Stop()
	}
	_ = os.Remove(sock)
}

func (p *Plugin) register(ctx context.Context, endpoint string) error {
	conn, err := grpc.NewClient("unix://"+filepath.Join(p.Dir, "kubelet.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("dialing the kubelet: %w", err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: endpoint, ResourceName: p.ResourceName,
		Options: &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: p.Preferred},
	})
	if err != nil {
		return fmt.Errorf("registering %s: %w", p.ResourceName, err)
	}
	return nil
}

// watch returns errReregister when kubelet.sock is re-created, our socket
// is gone, or the kubelet dropped our stream and opened none for
// StreamGrace; nil when ctx ends.
func (p *Plugin) watch(ctx context.Context, sock string, kubelet os.FileInfo, srv *server) error {
	tick := time.NewTicker(p.poll())
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if now, err := os.Stat(filepath.Join(p.Dir, "kubelet.sock")); err != nil || !os.SameFile(now, kubelet) {
			return fmt.Errorf("%w: kubelet.sock was re-created", errReregister)
		}
		if _, err := os.Stat(sock); err != nil {
			return fmt.Errorf("%w: our socket %s is gone", errReregister, sock)
		}
		if srv.orphaned(p.grace()) {
			return fmt.Errorf("%w: the kubelet closed its stream", errReregister)
		}
	}
}

// SocketMode is the mode of every socket a Plugin serves on.
const SocketMode = 0o600

// SocketName is a socket file name unique to one registration: the
// resource name made safe for a file name, and the time in base 36.
func SocketName(resource string, now time.Time) string {
	safe := fileSafe(resource)
	return safe[:min(len(safe), 60)] + "-" + strconv.FormatInt(now.UnixNano(), 36) + ".sock"
}

func fileSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' {
			return r
		}
		return '_'
	}, s)
}

// RemoveStaleSockets removes the sockets in dir of domain's resources
// (SocketName's "<domain>_*.sock") on which nothing listens: those that a
// bridge killed before its shutdown left behind. A socket that another
// process still serves (the old pod of a rolling update) accepts the
// connect and is kept, and so is one whose connect fails otherwise.
func RemoveStaleSockets(dir, domain string) (removed []string, err error) {
	paths, err := filepath.Glob(filepath.Join(dir, fileSafe(domain)+"_*.sock"))
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, path := range paths {
		if fi, err := os.Lstat(path); err != nil || fi.Mode().Type() != fs.ModeSocket {
			continue
		}
		conn, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			conn.Close()
			continue
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			continue
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, filepath.Base(path))
	}
	return removed, errors.Join(errs...)
}

func (p *Plugin) poll() time.Duration {
	if p.PollInterval > 0 {
		return p.PollInterval
	}
	return time.Second
}

func (p *Plugin) grace() time.Duration {
	if p.StreamGrace > 0 {
		return p.StreamGrace
	}
	return 5 * time.Second
}

func (p *Plugin) log() *slog.Logger {
	if p.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return p.Logger
}
