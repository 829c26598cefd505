package dradevices

import (
	"errors"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/invoke"
)

func TestDropInSettings(t *testing.T) {
	for _, tc := range []struct {
		name, dra string // the member, "" for none
		want      resourceapi.DeviceTaintEffect
		bad       bool
	}{
		{"none", "", resourceapi.DeviceTaintEffectNoSchedule, false},
		{"null", `null`, resourceapi.DeviceTaintEffectNoSchedule, false},
		{"empty", `{}`, resourceapi.DeviceTaintEffectNoSchedule, false},
		{"NoSchedule", `{"unhealthyTaintEffect":"NoSchedule"}`, resourceapi.DeviceTaintEffectNoSchedule, false},
		{"NoExecute", `{"unhealthyTaintEffect":"NoExecute"}`, resourceapi.DeviceTaintEffectNoExecute, false},
		// None would let the scheduler allocate the device.
		{"None", `{"unhealthyTaintEffect":"None"}`, resourceapi.DeviceTaintEffectNoSchedule, true},
		{"lower case", `{"unhealthyTaintEffect":"noexecute"}`, resourceapi.DeviceTaintEffectNoSchedule, true},
		{"not a string", `{"unhealthyTaintEffect":true}`, resourceapi.DeviceTaintEffectNoSchedule, true},
		{"a misspelt member", `{"unhealthyTaintEfect":"NoExecute"}`, resourceapi.DeviceTaintEffectNoSchedule, true},
		{"not an object", `"NoExecute"`, resourceapi.DeviceTaintEffectNoSchedule, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := `{"cdiVersion":"0.1.0","name":"n","type":"tty","plugin":"generic-tty","args":{"dra":1}`
			if tc.dra != "" {
				doc += `,"dra":` + tc.dra
			}
			conf := &invoke.Conf{Path: "/etc/cdi/tty.d/generic.conf", Config: spec.Config{Bytes: []byte(doc + "}")}}
			got, err := DropInSettings(conf)
			if got.UnhealthyEffect != tc.want || (err != nil) != tc.bad || (err != nil && !errors.Is(err, ErrSettings)) {
				t.Errorf("DropInSettings = %+v, %v; want %s, an error: %v", got, err, tc.want, tc.bad)
			}
		})
	}
}
