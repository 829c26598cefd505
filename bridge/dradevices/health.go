package dradevices

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/bridge/dra"
	"github.com/cdiexec/cdi/spec"
)

// TaintUnhealthy is the name, in the driver's domain, of the taint of an
// unhealthy device: <driver>/unhealthy, its value why (one of the
// Unhealthy reasons).
const TaintUnhealthy = "unhealthy"

// Why a device is unhealthy, as its taint's value says it.
const (
	// UnhealthyVanished: the plugin's INFO no longer lists it, and it is
	// kept because a container or a claim holds it.
	UnhealthyVanished = "vanished"
	// UnhealthyInfoFailed: the drop-in's INFO failed; its devices are
	// the last ones it listed.
	UnhealthyInfoFailed = "info-failed"
	// UnhealthyReported: INFO lists it unhealthy: the plugin's own check
	// failed (the endpoint plugin's probe of a camera).
	UnhealthyReported = "reported"
)

// UnhealthyTaint is the taint of d of pool p, unhealthy, with effect;
// but NoSchedule for a device whose drop-in's INFO failed, whatever
// effect says: a failed INFO (a plugin killed at its timeout on a busy
// node, say) says nothing of the devices, and NoExecute would evict
// every pod of the drop-in at once.
func UnhealthyTaint(driver string, p discovery.Pool, d spec.DeviceInfo, effect resourceapi.DeviceTaintEffect) resourceapi.DeviceTaint {
	why, _ := unhealthy(p, d)
	if why == UnhealthyInfoFailed {
		effect = resourceapi.DeviceTaintEffectNoSchedule
	}
	return resourceapi.DeviceTaint{Key: driver + "/" + TaintUnhealthy, Value: why, Effect: effect}
}

// unhealthy says why d of pool p is unhealthy: a reason, and a message
// for the kubelet, which shows it in the pod's status.
func unhealthy(p discovery.Pool, d spec.DeviceInfo) (reason, message string) {
	dropIn := ""
	if p.Conf != nil {
		dropIn = p.Conf.Path
	}
	switch {
	case p.Vanished[d.ID]:
		return UnhealthyVanished, fmt.Sprintf("vanished: INFO of %s no longer lists it", dropIn)
	case p.Err != nil:
		return UnhealthyInfoFailed, fmt.Sprintf("INFO of %s failed: %v", dropIn, p.Err)
	}
	return UnhealthyReported, fmt.Sprintf("INFO of %s lists it unhealthy: the plugin's check of it failed (the endpoint plugin's probe, say)", dropIn)
}

// Health is what the kubelet is told of the devices' health, as of
// checked, the discovery of pools: every device of pools, by the DRA
// pool and device name Prepare gives it (a shared device's pool is the
// cluster's), an unhealthy one saying why, one whose drop-in's INFO
// failed Unknown (the bridge cannot tell; it keeps the devices INFO last
// listed); and, unhealthy, every device a prepared claim holds that pools
// do not list (gone with its drop-in, or vanished and not kept), so that
// the pod of the claim sees it gone.
func (p *Preparer) Health(pools []discovery.Pool, checked time.Time) []dra.DeviceHealth {
	var out []dra.DeviceHealth
	listed := map[string]bool{}
	for _, pl := range pools {
		for _, d := range pl.Devices {
			h := dra.DeviceHealth{Pool: p.draPool(pl.Name, d.Shared), Name: DeviceName(d.ID), Health: dra.Healthy, Checked: checked}
			if !d.Healthy {
				var why string
				why, h.Message = unhealthy(pl, d)
				h.Health = dra.Unhealthy
				if why == UnhealthyInfoFailed {
					h.Health = dra.Unknown
				}
			}
			out = append(out, clip(h))
			listed[h.Pool+"/"+h.Name] = true
		}
	}
	for _, d := range p.held() {
		h := dra.DeviceHealth{Pool: p.draPool(d.Pool, d.Shared), Name: d.Device, Health: dra.Unhealthy, Checked: checked,
			Message: fmt.Sprintf("vanished: no drop-in's INFO lists device %s of pool %s", d.ID, d.Pool)}
		if !listed[h.Pool+"/"+h.Name] {
			listed[h.Pool+"/"+h.Name] = true
			out = append(out, h)
		}
	}
	return out
}

// draPool is the DRA pool of the bridge's pool: the node's, or for a
// shared device the cluster's.
func (p *Preparer) draPool(pool string, shared bool) string {
	if shared {
		return SharedPoolName(pool)
	}
	return PoolName(p.Node, pool)
}

// maxHealthMessage bounds a health message: the kubelet keeps 1,024
// bytes (corev1.ResourceHealthMessageMaxLength), and takes a report of
// at most 4 MiB (gRPC's default), which 5,000 devices, the most a node is
// built for, each with 1,024 bytes would pass. An INFO failure's whole
// error is on /readyz and in the log.
const maxHealthMessage = 256

// clip makes a message valid UTF-8, which gRPC requires of the report
// (a plugin's error may quote any bytes), and at most maxHealthMessage
// bytes.
func clip(h dra.DeviceHealth) dra.DeviceHealth {
	m := strings.ToValidUTF8(h.Message, "\uFFFD")
	if len(m) > maxHealthMessage {
		m = m[:maxHealthMessage-len("...")]
		for !utf8.ValidString(m) { // cut in a character
			m = m[:len(m)-1]
		}
		m += "..."
	}
	h.Message = m
	return h
}

// held is the devices of the claims the checkpoint holds.
func (p *Preparer) held() []PreparedDevice {
	var out []PreparedDevice
	for _, uid := range p.Checkpoint.UIDs() {
		rec, _ := p.Checkpoint.Get(uid)
		out = append(out, rec.Devices...)
	}
	return out
}
