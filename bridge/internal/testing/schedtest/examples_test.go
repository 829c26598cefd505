package schedtest

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
)

// The shipped examples decode strictly, and each file holds objects of
// its kind: a misspelt field shows without starting a cluster.
func TestExamplesDecode(t *testing.T) {
	classes := decodeExamples[resourceapi.DeviceClass](t, "deviceclasses.yaml")
	templates := decodeExamples[resourceapi.ResourceClaimTemplate](t, "claimtemplates.yaml")
	if len(classes) == 0 || len(templates) == 0 {
		t.Fatalf("%d DeviceClasses, %d ResourceClaimTemplates: want some of each", len(classes), len(templates))
	}
	for _, c := range classes {
		if c.Kind != "DeviceClass" || c.Name == "" {
			t.Errorf("DeviceClass %+v", c.TypeMeta)
		}
	}
	for _, tmpl := range templates {
		if tmpl.Kind != "ResourceClaimTemplate" || tmpl.Name == "" {
			t.Errorf("ResourceClaimTemplate %s: %+v", tmpl.Name, tmpl.TypeMeta)
		}
	}
}
