// Command demokubelet is the kubelet's side of the README demo: it serves
// kubelet.sock in a device-plugin directory (as the tests' kubelettest
// does, which it runs), waits for a running cdi-bridge to register, then
// makes one Instance-level and one Configuration-level Allocate as the
// kubelet would when admitting a pod, and prints what the container would
// get.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cdiexec/cdi/bridge/internal/testing/kubelettest"
)

type options struct {
	dir, domain, instancePool, pool string
	count                           int
	timeout                         time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.dir, "device-plugin-dir", "", "directory to serve kubelet.sock in (the bridge's --device-plugin-dir)")
	flag.StringVar(&o.domain, "domain", "cdi.local", "the bridge's --domain")
	flag.StringVar(&o.instancePool, "instance-pool", "gpu-drm", "allocate one slot of the first device of this pool, at the Instance level")
	flag.StringVar(&o.pool, "pool", "tty-generic", "allocate --count virtual devices of this pool, at the Configuration level")
	flag.IntVar(&o.count, "count", 2, "virtual devices to ask the pool for")
	flag.DurationVar(&o.timeout, "timeout", 30*time.Second, "how long to wait for the bridge")
	flag.Parse()
	if err := run(o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "demokubelet:", err)
		os.Exit(1)
	}
}

func run(o options, out io.Writer) error {
	if o.dir == "" {
		return errors.New("--device-plugin-dir is required")
	}
	k, err := kubelettest.Start(o.dir)
	if err != nil {
		return err
	}
	defer k.Stop()
	fmt.Fprintf(out, "kubelet: serving %s/kubelet.sock, waiting for the bridge\n", o.dir)
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	il, err := waitInstanceResource(ctx, k, o.domain+"/"+o.instancePool+"-")
	if err != nil {
		return err
	}
	cl := o.domain + "/" + o.pool
	for _, req := range []struct {
		resource, level string
		count           int
	}{{il, "Instance-level", 1}, {cl, "Configuration-level", o.count}} {
		if err := allocate(ctx, k, out, req.resource, req.level, req.count); err != nil {
			return err
		}
	}
	return nil
}

// waitInstanceResource returns the first registered resource named with
// prefix: the pool's devices' Instance-level resources are
// <domain>/<pool>-<hash>.
func waitInstanceResource(ctx context.Context, k *kubelettest.Kubelet, prefix string) (string, error) {
	for {
		var names []string
		for _, r := range k.Registrations() {
			if strings.HasPrefix(r.ResourceName, prefix) {
				names = append(names, r.ResourceName)
			}
		}
		if len(names) > 0 {
			sort.Strings(names)
			return names[0], nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("no resource %s* registered: %w", prefix, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// allocate waits until resource lists count healthy devices, allocates
// the first count of them for one container, and prints the response.
func allocate(ctx context.Context, k *kubelettest.Kubelet, out io.Writer, resource, level string, count int) error {
	deadline, _ := ctx.Deadline()
	devs, err := k.WaitFor(resource, time.Until(deadline), func(_ int, devs []*pluginapi.Device) bool {
		return len(healthy(devs)) >= count
	})
	if err != nil {
		return err
	}
	ids := healthy(devs)[:count]
	noun := "devices"
	if len(devs) == 1 {
		noun = "device"
	}
	fmt.Fprintf(out, "\n%s: %s lists %d %s; Allocate %v\n", level, resource, len(devs), noun, ids)
	resp, err := k.Allocate(ctx, resource, ids)
	if err != nil {
		return fmt.Errorf("allocating %s %v: %w", resource, ids, err)
	}
	printContainer(out, resp.ContainerResponses[0])
	return nil
}

func healthy(devs []*pluginapi.Device) []string {
	var ids []string
	for _, d := range devs {
		if d.Health == pluginapi.Healthy {
			ids = append(ids, d.ID)
		}
	}
	return ids
}

// printContainer shows what the container runtime is told to give the
// container.
func printContainer(out io.Writer, c *pluginapi.ContainerAllocateResponse) {
	for _, d := range c.Devices {
		fmt.Fprintf(out, "  device      %s -> %s (%s)\n", d.HostPath, d.ContainerPath, d.Permissions)
	}
	for _, m := range c.Mounts {
		fmt.Fprintf(out, "  mount       %s -> %s (read-only %v)\n", m.HostPath, m.ContainerPath, m.ReadOnly)
	}
	for _, d := range c.CdiDevices {
		fmt.Fprintf(out, "  cdi device  %s\n", d.Name)
	}
	printMap(out, "env", c.Envs)
	printMap(out, "annotation", c.Annotations)
}

func printMap(out io.Writer, what string, m map[string]string) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(out, "  %-11s %s=%s\n", what, k, m[k])
	}
}
