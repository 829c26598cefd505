package dradevices

import (
	"errors"
	"fmt"
	"sort"

	"github.com/tidwall/gjson"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/cdiexec/cdi/spec/invoke"
)

// SettingsKey is the top-level member of a drop-in that holds what it
// asks of the DRA front end (Settings). It is the bridge's, not the
// plugin's: plugins ignore top-level members they do not know (SPEC.md,
// Section 1), and refuse args members they do not know.
const SettingsKey = "dra"

// Settings are what a drop-in asks of the DRA front end, in its member
// "dra":
//
//	"dra": {"unhealthyTaintEffect": "NoExecute"}
type Settings struct {
	// UnhealthyEffect is the effect of an unhealthy device's taint
	// (member unhealthyTaintEffect): NoSchedule, the default, keeps new
	// claims off the device; NoExecute also evicts the pods whose claims
	// hold it, for devices without which a pod is useless (a device
	// unhealthy for a failed INFO is NoSchedule all the same:
	// UnhealthyTaint).
	UnhealthyEffect resourceapi.DeviceTaintEffect
}

// ErrSettings is wrapped by DropInSettings' error.
var ErrSettings = errors.New("drop-in's DRA settings")

// settingsMembers are the members "dra" may hold.
var settingsMembers = []string{"unhealthyTaintEffect"}

// DropInSettings reads conf's Settings. A member that is not an object,
// a member of it the bridge does not know, or a value it does not take
// is an error, with the defaults returned: the front end logs it and
// serves the drop-in as if it set nothing.
func DropInSettings(conf *invoke.Conf) (Settings, error) {
	def := Settings{UnhealthyEffect: resourceapi.DeviceTaintEffectNoSchedule}
	if conf == nil {
		return def, nil
	}
	v := gjson.GetBytes(conf.Bytes, SettingsKey)
	if !v.Exists() || v.Type == gjson.Null {
		return def, nil
	}
	if !v.IsObject() {
		return def, fmt.Errorf("%w: %s: %q must be an object", ErrSettings, conf.Path, SettingsKey)
	}
	var unknown []string
	v.ForEach(func(k, _ gjson.Result) bool {
		if k.String() != settingsMembers[0] {
			unknown = append(unknown, k.String())
		}
		return true
	})
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return def, fmt.Errorf("%w: %s: %q holds %q, which the bridge does not know (it knows %q)", ErrSettings, conf.Path, SettingsKey, unknown, settingsMembers)
	}
	switch e := v.Get(settingsMembers[0]); {
	case !e.Exists():
	case e.Type == gjson.String && (e.Str == string(resourceapi.DeviceTaintEffectNoSchedule) || e.Str == string(resourceapi.DeviceTaintEffectNoExecute)):
		def.UnhealthyEffect = resourceapi.DeviceTaintEffect(e.Str)
	default:
		return def, fmt.Errorf("%w: %s: %s.%s is %s, want \"NoSchedule\" or \"NoExecute\"", ErrSettings, conf.Path, SettingsKey, settingsMembers[0], e.Raw)
	}
	return def, nil
}
