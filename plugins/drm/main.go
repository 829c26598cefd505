// Command drm is the CDI plugin for GPUs driven by the Linux Direct
// Rendering Manager. It finds them in /sys/class/drm, one device per PCI
// function (identified by its PCI address, which survives reboots and
// driver reloads, unlike the card index), and hands out their primary
// (/dev/dri/cardN) and render (/dev/dri/renderDN) nodes.
//
// Args, besides the engine's common ones (root, stateDir, capacity, cdiKind):
//
//	want_device_nodes   ["primary", "render"] (default both): which nodes a container gets
//	vendorid_whitelist  ["0x8086", ...] (default all): PCI vendor ids to serve
//
// The only resource-spec served is the configuration's type, e.g. "gpu".
// A GPU is healthy while its nodes exist under root's /dev; its NUMA node
// is the PCI function's numa_node (-1 is unknown). Properties: vendor,
// device, pciAddress, card, renderNode and driver (when one is bound).
package main

import (
	"github.com/cdiexec/cdi/plugins/internal/engine"
	"github.com/cdiexec/cdi/skel"
)

func main() { skel.Main(engine.Plugin(family())) }
