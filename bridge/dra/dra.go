package dra

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/go-logr/logr"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
)

// Device is one device a prepared claim gives its containers.
type Device struct {
	// Requests are the claim's requests the device was allocated for.
	Requests []string
	// Pool and Name are the DRA pool and device, as in the allocation.
	Pool, Name string
	// CDIIDs are the qualified CDI names that give a container the device.
	CDIIDs []string
	// ShareID is the allocation's share of a device with consumable
	// capacity, nil for a device allocated whole.
	ShareID *types.UID
}

// Devices prepares and unprepares claims. Both calls must be idempotent:
// the kubelet repeats them after its own restarts and on any error.
type Devices interface {
	// Prepare readies, on this node, the devices of claim that this
	// driver allocated and returns them.
	Prepare(ctx context.Context, claim *resourceapi.ResourceClaim) ([]Device, error)
	// Unprepare undoes Prepare for the claim of that UID; a claim not
	// prepared is no error.
	Unprepare(ctx context.Context, uid types.UID) error
}

// Publisher publishes this node's ResourceSlices, and tells the kubelet
// its devices' health; a *Driver is one.
type Publisher interface {
	PublishResources(ctx context.Context, resources resourceslice.DriverResources) error
	// ReportHealth replaces the health of every device the kubelet is
	// told of with devices.
	ReportHealth(devices []DeviceHealth)
}

// Config is what Start needs.
type Config struct {
	// DriverName is the DRA driver's name, a DNS subdomain.
	DriverName string
	// NodeName is this node; its Node object owns the slices.
	NodeName string
	Client   kubernetes.Interface
	Devices  Devices
	// PluginDir holds the driver's gRPC socket, dra.sock;
	// /var/lib/kubelet/plugins/<driver> when empty. RegistrarDir is the
	// kubelet's plugin registration directory,
	// /var/lib/kubelet/plugins_registry when empty.
	PluginDir, RegistrarDir string
	Logger                  *slog.Logger
	// OnFatal, if set, is told of an error the kubelet plugin cannot
	// recover from (its gRPC server failed); the bridge then stops, and
	// its DaemonSet restarts it.
	OnFatal func(error)
	// Slices, if set, publishes the node's slices: a NodeSlices started
	// earlier (StartNodeSlices), so that its start runs beside what the
	// caller does before the driver's; nil starts one with the driver.
	// Stop stops it either way.
	Slices *NodeSlices
}

// Driver is a running kubelet plugin.
type Driver struct {
	helper *kubeletplugin.Helper
	slices *NodeSlices
	health *healthFeed
	reg    *registration
}

var _ Publisher = (*Driver)(nil)

// ErrConfig is wrapped by Start's error for a Config that lacks a field.
var ErrConfig = errors.New("DRA driver configuration")

// Start registers the driver with the kubelet and serves it until ctx
// ends or Stop is called, and starts the controller of the node's
// ResourceSlices (NodeSlices, unless cfg.Slices is one), which publishes
// nothing before the first PublishResources. The kubelet-plugin library logs through klog; its
// lines go to cfg.Logger.
func Start(ctx context.Context, cfg Config) (*Driver, error) {
	if cfg.DriverName == "" || cfg.NodeName == "" || cfg.Client == nil || cfg.Devices == nil {
		return nil, fmt.Errorf("%w: driver name, node name, client and devices are all needed", ErrConfig)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx = klog.NewContext(ctx, logr.FromSlogHandler(log.Handler()))
	opts := []kubeletplugin.Option{
		kubeletplugin.DriverName(cfg.DriverName), kubeletplugin.NodeName(cfg.NodeName),
		kubeletplugin.KubeClient(cfg.Client),
	}
	pluginDir := cfg.PluginDir
	if pluginDir == "" {
		pluginDir = filepath.Join(kubeletplugin.KubeletPluginsDir, cfg.DriverName)
	}
	// The library listens in it without creating it; the kubelet does
	// not create it either.
	if err := os.MkdirAll(pluginDir, 0o750); err != nil {
		return nil, fmt.Errorf("DRA plugin directory: %w", err)
	}
	opts = append(opts, kubeletplugin.PluginDataDirectoryPath(pluginDir))
	if cfg.RegistrarDir != "" {
		opts = append(opts, kubeletplugin.RegistrarDirectoryPath(cfg.RegistrarDir))
	}
	reg := &registration{}
	opts = append(opts, kubeletplugin.GRPCInterceptor(reg.observe))
	p := &plugin{devices: cfg.Devices, log: log, onFatal: cfg.OnFatal, health: newHealthFeed()}
	h, err := kubeletplugin.Start(ctx, p, opts...)
	if err != nil {
		return nil, fmt.Errorf("starting the DRA kubelet plugin %s: %w", cfg.DriverName, err)
	}
	slices := cfg.Slices
	if slices == nil {
		slices = StartNodeSlices(ctx, cfg.DriverName, cfg.NodeName, cfg.Client, p.publishError)
	}
	return &Driver{helper: h, slices: slices, health: p.health, reg: reg}, nil
}

// PublishResources hands the node's slices to the slice controller
// (NodeSlices.Publish), which writes them in the background.
func (d *Driver) PublishResources(_ context.Context, resources resourceslice.DriverResources) error {
	d.slices.Publish(resources)
	return nil
}

// ReportHealth makes devices the complete list of the driver's devices'
// health, which the kubelet's health stream sends at once, and again
// every HealthResend until the next report.
func (d *Driver) ReportHealth(devices []DeviceHealth) { d.health.set(devices) }

// ErrNotRegistered is wrapped by Registered's error until the kubelet has
// registered the driver.
var ErrNotRegistered = errors.New("DRA driver not registered with the kubelet")

// Registered is nil once the kubelet has registered the driver: before,
// it refuses to prepare the driver's claims, and a pod it refused waits
// for the kubelet's next look at it, up to a minute later.
func (d *Driver) Registered() error { return d.reg.err() }

// Stop unregisters the driver and waits for its goroutines. The slices
// stay: a bridge restarting must not make the scheduler see no devices.
func (d *Driver) Stop() {
	d.helper.Stop()
	d.slices.Stop()
}
