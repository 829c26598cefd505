package kube

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
)

// tableAccept asks the API server for what kubectl get prints: a Table of
// the CRD's printer columns.
const tableAccept = "application/json;as=Table;v=v1;g=meta.k8s.io"

// getTable asks for the Table of the Instances in namespace.
func getTable(t *testing.T, cfg *rest.Config, namespace string) *metav1.Table {
	t.Helper()
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("%s/apis/%s/%s/namespaces/%s/%s", cfg.Host, Group, Version, namespace, Resource.Resource)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", tableAccept)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	table := &metav1.Table{}
	if err := json.NewDecoder(resp.Body).Decode(table); err != nil || resp.StatusCode != http.StatusOK || table.Kind != "Table" {
		t.Fatalf("GET %s as a Table: %s, kind %q, %v", url, resp.Status, table.Kind, err)
	}
	return table
}

// testTable: kubectl get cdii tells which device, how busy, seen where
// (and -o wide whether shared, and a GPU's PCI address), from what the
// Store writes: the spec, and the status summary it writes with it.
func testTable(t *testing.T, env *apitest.Env) {
	ns := env.Namespace(t)
	gpu, cam := seedInstances(t, newStore(t, env.Config, ns))
	table := getTable(t, env.Config, ns)
	var columns []string
	for _, c := range table.ColumnDefinitions {
		columns = append(columns, fmt.Sprintf("%s/%d", c.Name, c.Priority))
	}
	want := []string{"Name/0", "Config/0", "Device/0", "Slots/0", "Nodes/0", "Age/0", "Shared/1", "PCI/1"}
	if !slices.Equal(columns, want) {
		t.Fatalf("columns (name/priority) %v, want %v", columns, want)
	}
	rows := map[string]string{}
	for _, r := range table.Rows {
		if len(r.Cells) != len(want) {
			t.Fatalf("row %v: %d cells, want %d", r.Cells, len(r.Cells), len(want))
		}
		// Every cell but Age, which is a duration since creation.
		rows[fmt.Sprint(r.Cells[0])] = fmt.Sprint(append(r.Cells[1:5:5], r.Cells[6:]...))
	}
	wantRows := map[string]string{
		gpu: `[gpu-drm 0000:03:00.0 1/2 ["n1"] false 0000:03:00.0]`,
		cam: `[camera-endpoint door 2/3 ["n1","n2"] true <nil>]`,
	}
	for name, cells := range wantRows {
		if rows[name] != cells {
			t.Errorf("row %s: %s, want %s", name, rows[name], cells)
		}
	}
	if len(rows) != len(wantRows) {
		t.Errorf("rows %v, want %d", rows, len(wantRows))
	}
}

// seedInstances writes, through s, a GPU seen by n1 with one of its two
// slots held, and a camera seen by n1 and n2 with two of its three held,
// and returns their names.
func seedInstances(t *testing.T, s *Store) (gpuName, camName string) {
	t.Helper()
	gpu := instance.Instance{Name: instance.Name("gpu-drm", "0000:03:00.0", "n1", false), Config: "gpu-drm",
		DeviceID: "0000:03:00.0", Capacity: 2, Properties: map[string]string{"pciAddress": "0000:03:00.0", "vendor": "0x8086"}}
	cam := instance.Instance{Name: instance.Name("camera-endpoint", "door", "", true), Config: "camera-endpoint",
		DeviceID: "door", Shared: true, Capacity: 3}
	for _, seen := range []struct {
		node string
		in   instance.Instance
	}{{"n1", gpu}, {"n1", cam}, {"n2", cam}} {
		if err := s.Observe(t.Context(), seen.node, seen.in.Config, []instance.Instance{seen.in}); err != nil {
			t.Fatal(err)
		}
	}
	claims := []instance.Claim{{Instance: gpu.Name, Slot: instance.SlotID(gpu.Name, 1), Value: "n1"},
		{Instance: cam.Name, Slot: instance.SlotID(cam.Name, 0), Value: instance.ConfigurationLevelUsage("0", "n1")},
		{Instance: cam.Name, Slot: instance.SlotID(cam.Name, 2), Value: "n2"}}
	if err := s.Claim(t.Context(), claims); err != nil {
		t.Fatal(err)
	}
	return gpu.Name, cam.Name
}
