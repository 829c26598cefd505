package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// registration is one plugin's socket and gRPC server, registered with
// the kubelet.
type registration struct {
	sock string
	g    *grpc.Server
	srv  *server
}

// serverOptions keep a plugin's connection small: the kubelet's calls
// are a few small messages, and a node may serve thousands of plugins.
// Without read and write buffers gRPC reads and writes each frame
// directly; the lists a stream sends are written without a copy.
func serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ReadBufferSize(0), grpc.WriteBufferSize(0)}
}

// kubeletConn is the one client connection to the kubelet's Registration
// service that every registration uses.
type kubeletConn struct {
	path string // kubelet.sock
	mu   sync.Mutex
	conn *grpc.ClientConn
}

// reset drops the connection: the next registration dials kubelet.sock
// afresh, rather than waiting out gRPC's reconnect backoff on a
// connection to a kubelet that is gone.
func (c *kubeletConn) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}

func (c *kubeletConn) close() { c.reset() }

func (c *kubeletConn) client() (pluginapi.RegistrationClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		conn, err := grpc.NewClient("unix://"+c.path, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, fmt.Errorf("dialing the kubelet: %w", err)
		}
		c.conn = conn
	}
	return pluginapi.NewRegistrationClient(c.conn), nil
}

// registration serves spec on a new socket in dir and registers it: the
// server answers before Register is sent, since the kubelet dials back
// inside the call.
func (c *kubeletConn) registration(ctx context.Context, spec Spec, dir string) (*registration, error) {
	sock := filepath.Join(dir, SocketName(spec.Resource, time.Now()))
	_ = os.Remove(sock)
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", sock, err)
	}
	// The socket's mode comes from the process umask (0777 under umask
	// 000); only the kubelet, which runs as root, has to connect.
	if err := os.Chmod(sock, SocketMode); err != nil {
		_ = lis.Close()
		return nil, fmt.Errorf("socket %s: %w", sock, err)
	}
	reg := &registration{sock: sock, g: grpc.NewServer(serverOptions()...), srv: newServer(spec)}
	pluginapi.RegisterDevicePluginServer(reg.g, reg.srv)
	go func() { _ = reg.g.Serve(lis) }()
	if err := c.register(ctx, spec, filepath.Base(sock)); err != nil {
		reg.stop(false)
		return nil, err
	}
	return reg, nil
}

func (c *kubeletConn) register(ctx context.Context, spec Spec, endpoint string) error {
	client, err := c.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = client.Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: endpoint, ResourceName: spec.Resource,
		Options: &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: spec.Preferred},
	})
	if err != nil {
		return fmt.Errorf("registering %s: %w", spec.Resource, err)
	}
	return nil
}

// stop ends the open streams, with an empty list first if withdraw, lets
// running calls finish (for a while) and removes the socket.
//
// Only a resource the bridge no longer serves is withdrawn. A bridge
// that stops leaves its streams without one: the next pod of a rolling
// update may have registered the same resources already, the kubelet
// (1.37) keeps both registrations and applies either one's lists to the
// resource, so an empty list would empty the new bridge's resource until
// its list changes. The kubelet marks the resource's devices unhealthy
// when its last registration's stream ends, and so stops offering them
// all the same when no other bridge serves them.
func (r *registration) stop(withdraw bool) {
	r.srv.withdraw = withdraw
	close(r.srv.done)
	stopped := make(chan struct{})
	go func() { r.g.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		r.g.Stop()
	}
	_ = os.Remove(r.sock)
}

// SocketMode is the mode of every socket a plugin serves on.
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
