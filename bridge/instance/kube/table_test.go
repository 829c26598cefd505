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

// getTable asks for the Table of the objects of resource in namespace.
func getTable(t *testing.T, cfg *rest.Config, namespace, resource string) *metav1.Table {
	t.Helper()
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("%s/apis/%s/%s/namespaces/%s/%s", cfg.Host, Group, Version, namespace, resource)
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

// testTable: kubectl get cdii tells which device and how busy (and -o
// wide whether shared, and a GPU's PCI address), from what the Store
// writes: the spec, and the status summary it writes with it; kubectl
// get cdip tells which node sees how many devices of which pool.
func testTable(t *testing.T, env *apitest.Env) {
	ns := env.Namespace(t)
	gpu, cam := seedInstances(t, newStore(t, env.Config, ns))
	checkTable(t, getTable(t, env.Config, ns, Resource.Resource),
		[]string{"Name/0", "Config/0", "Device/0", "Slots/0", "Age/0", "Shared/1", "PCI/1"}, map[string]string{
			gpu: `[gpu-drm 0000:03:00.0 1/2 false 0000:03:00.0]`,
			cam: `[camera-endpoint door 2/3 true <nil>]`,
		})
	checkTable(t, getTable(t, env.Config, ns, PresenceResource.Resource),
		[]string{"Name/0", "Node/0", "Pool/0", "Devices/0", "Age/0"}, map[string]string{
			"gpu-drm.n1":         `[n1 gpu-drm 1]`,
			"camera-endpoint.n1": `[n1 camera-endpoint 1]`,
			"camera-endpoint.n2": `[n2 camera-endpoint 1]`,
		})
}

// checkTable compares a Table's columns (name/priority) and its rows, by
// name, every cell but the name and Age (a duration since creation).
func checkTable(t *testing.T, table *metav1.Table, columns []string, rows map[string]string) {
	t.Helper()
	var got []string
	age := -1
	for i, c := range table.ColumnDefinitions {
		got = append(got, fmt.Sprintf("%s/%d", c.Name, c.Priority))
		if c.Name == "Age" {
			age = i
		}
	}
	if !slices.Equal(got, columns) {
		t.Fatalf("columns (name/priority) %v, want %v", got, columns)
	}
	gotRows := map[string]string{}
	for _, r := range table.Rows {
		if len(r.Cells) != len(columns) {
			t.Fatalf("row %v: %d cells, want %d", r.Cells, len(r.Cells), len(columns))
		}
		gotRows[fmt.Sprint(r.Cells[0])] = fmt.Sprint(append(slices.Clone(r.Cells[1:age]), r.Cells[age+1:]...))
	}
	for name, cells := range rows {
		if gotRows[name] != cells {
			t.Errorf("row %s: %s, want %s", name, gotRows[name], cells)
		}
	}
	if len(gotRows) != len(rows) {
		t.Errorf("rows %v, want %d", gotRows, len(rows))
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
