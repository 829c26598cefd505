package apitest

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

var (
	instancesGVR = schema.GroupVersionResource{Group: "cdi.local", Version: "v1alpha1", Resource: "instances"}
	reviewsGVR   = schema.GroupVersionResource{Group: "authentication.k8s.io", Version: "v1", Resource: "selfsubjectreviews"}
)

const namespace = "default"

// TestServer starts one server for all its subtests (a start takes tens
// of seconds) and stops it in the last one.
func TestServer(t *testing.T) {
	env := Start(t, Options{
		Users: []User{{Name: "bridge", Groups: []string{"cdi:bridges"}}, {Name: nodeUser, Groups: []string{"system:nodes"}}},
		// What a node test gives its apiserver; extra args reach it checks.
		ExtraArgs: []string{"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction"},
	})
	t.Logf("etcd and kube-apiserver ready %v after their start", env.Ready)
	crd, err := RepoFile(InstanceCRD)
	if err != nil {
		t.Fatal(err)
	}
	if err := InstallCRD(t.Context(), env.Config, crd); err != nil {
		t.Fatal(err)
	}
	client, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	instances := client.Resource(instancesGVR).Namespace(namespace)
	t.Run("instance reads back as written", func(t *testing.T) { testReadBack(t, instances) })
	t.Run("printer columns", func(t *testing.T) { testPrinterColumns(t, env.Config, instances) })
	t.Run("schema refuses bad instances", func(t *testing.T) { testCreateInvalid(t, instances) })
	t.Run("schema refuses bad updates", func(t *testing.T) { testUpdates(t, instances) })
	t.Run("apply keeps other managers' usage keys", func(t *testing.T) { testApplyOwnership(t, instances) })
	t.Run("tokens authenticate their users", func(t *testing.T) { testIdentities(t, env) })
	t.Run("extra args reach the apiserver", func(t *testing.T) { testExtraArgs(t, env) })
	t.Run("stop ends both servers", func(t *testing.T) { testStop(t, env) })
}

// instanceObject is a valid Instance with capacity slots, all free.
func instanceObject(name string, capacity int64) *unstructured.Unstructured {
	usage := map[string]any{}
	for i := range capacity {
		usage[name+"-"+strconv.FormatInt(i, 10)] = ""
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cdi.local/v1alpha1",
		"kind":       "Instance",
		"metadata":   map[string]any{"name": name, "namespace": namespace},
		"spec": map[string]any{
			"configurationName": "cam",
			"deviceId":          "/dev/video0",
			"nodes":             []any{"node-a", "node-b"},
			"shared":            true,
			"capacity":          capacity,
			"deviceUsage":       usage,
			"properties":        map[string]any{"VENDOR": "acme"},
		},
	}}
	return obj
}

func setSpec(obj *unstructured.Unstructured, value any, field ...string) {
	path := append([]string{"spec"}, field...)
	if value == nil {
		unstructured.RemoveNestedField(obj.Object, path...)
		return
	}
	if err := unstructured.SetNestedField(obj.Object, value, path...); err != nil {
		panic(err)
	}
}

func testReadBack(t *testing.T, instances dynamic.ResourceInterface) {
	want := instanceObject("cam-readback", 2)
	setSpec(want, "C:cam-v1:node-b", "deviceUsage", "cam-readback-1")
	if _, err := instances.Create(t.Context(), want, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := instances.Get(t.Context(), "cam-readback", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Object["spec"], want.Object["spec"]) {
		t.Errorf("spec read back\n%v\nwant\n%v", got.Object["spec"], want.Object["spec"])
	}
}

// testPrinterColumns asks for the Table kubectl get shows.
func testPrinterColumns(t *testing.T, cfg *rest.Config, instances dynamic.ResourceInterface) {
	if _, err := instances.Create(t.Context(), instanceObject("cam-columns", 3), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	table := getTable(t, cfg, "/apis/cdi.local/v1alpha1/namespaces/"+namespace+"/instances/cam-columns")
	var names []string
	priority := map[string]int32{}
	for _, c := range table.ColumnDefinitions {
		names = append(names, c.Name)
		priority[c.Name] = c.Priority
	}
	if want := []string{"Name", "Config", "Device", "Slots", "Age", "Shared", "PCI"}; !slices.Equal(names, want) {
		t.Fatalf("columns %v, want %v", names, want)
	}
	if priority["Shared"] != 1 || priority["PCI"] != 1 || priority["Slots"] != 0 {
		t.Errorf("priorities %v: want Shared and PCI 1 (wide only), the others 0", priority)
	}
	if len(table.Rows) != 1 {
		t.Fatalf("%d rows, want 1", len(table.Rows))
	}
	// No Slots: the bridge writes the status summary (bridge/instance/kube
	// tests it), this object has none. No PCI address in its properties.
	cells := table.Rows[0].Cells
	want := []any{"cam-columns", "cam", "/dev/video0", nil}
	if len(cells) != 7 || !reflect.DeepEqual(cells[:4], want) || cells[4] == "" || cells[5] != true || cells[6] != nil {
		t.Errorf("cells %#v, want %#v, an age, true and nil", cells, want)
	}
}

// getTable GETs path as a meta.k8s.io Table.
func getTable(t *testing.T, cfg *rest.Config, path string) metav1.Table {
	t.Helper()
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, cfg.Host+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", path, resp.Status)
	}
	var table metav1.Table
	if err := json.NewDecoder(resp.Body).Decode(&table); err != nil {
		t.Fatal(err)
	}
	if table.Kind != "Table" {
		t.Fatalf("GET %s: a %q, not a Table", path, table.Kind)
	}
	return table
}

// causeField is the field of the first cause of an Invalid error.
func causeFields(err error) []string {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil {
		return nil
	}
	var fields []string
	for _, c := range status.Status().Details.Causes {
		fields = append(fields, c.Field)
	}
	return fields
}

// wantInvalid checks err is an Invalid status naming a field under field.
func wantInvalid(t *testing.T, err error, field string) {
	t.Helper()
	if !apierrors.IsInvalid(err) {
		t.Fatalf("got %v, want an Invalid status", err)
	}
	fields := causeFields(err)
	if !slices.ContainsFunc(fields, func(f string) bool { return strings.HasPrefix(f, field) }) {
		t.Errorf("causes name %q, want %s: %v", fields, field, err)
	}
}

func testCreateInvalid(t *testing.T, instances dynamic.ResourceInterface) {
	tests := []struct {
		name  string
		edit  func(obj *unstructured.Unstructured)
		field string
	}{
		{"capacity 0", func(o *unstructured.Unstructured) { setSpec(o, int64(0), "capacity") }, "spec.capacity"},
		{"capacity above 1024", func(o *unstructured.Unstructured) { setSpec(o, int64(1025), "capacity") }, "spec.capacity"},
		{"no device id", func(o *unstructured.Unstructured) { setSpec(o, nil, "deviceId") }, "spec.deviceId"},
		{"node twice", func(o *unstructured.Unstructured) { setSpec(o, []any{"node-a", "node-a"}, "nodes") }, "spec.nodes"},
		{"malformed usage", func(o *unstructured.Unstructured) { setSpec(o, "C:vdev", "deviceUsage", "bad-0") }, "spec.deviceUsage"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := instanceObject("bad", 2)
			tt.edit(obj)
			_, err := instances.Create(t.Context(), obj, metav1.CreateOptions{})
			wantInvalid(t, err, tt.field)
		})
	}
	// The same object unedited is accepted, so each refusal above is the
	// edit's doing.
	if _, err := instances.Create(t.Context(), instanceObject("bad", 2), metav1.CreateOptions{}); err != nil {
		t.Fatalf("the unedited object: %v", err)
	}
}

// testUpdates checks what may change: not what the name is derived from,
// but capacity, also while claimed slots above it remain.
func testUpdates(t *testing.T, instances dynamic.ResourceInterface) {
	tests := []struct {
		name  string
		edit  func(obj *unstructured.Unstructured)
		field string // "" when the update must be accepted
	}{
		{"configuration renamed", func(o *unstructured.Unstructured) { setSpec(o, "mic", "configurationName") }, "spec.configurationName"},
		{"device id changed", func(o *unstructured.Unstructured) { setSpec(o, "/dev/video1", "deviceId") }, "spec.deviceId"},
		{"shared changed", func(o *unstructured.Unstructured) { setSpec(o, false, "shared") }, "spec.shared"},
		{"shrunk below a claimed slot", func(o *unstructured.Unstructured) {
			setSpec(o, int64(1), "capacity")
			setSpec(o, map[string]any{"upd-0": "", "upd-2": "node-a"}, "deviceUsage")
		}, ""},
		{"grown before its slots exist", func(o *unstructured.Unstructured) { setSpec(o, int64(5), "capacity") }, ""},
		{"node added and usage claimed", func(o *unstructured.Unstructured) {
			setSpec(o, []any{"node-a", "node-b", "node-c"}, "nodes")
			setSpec(o, "C:cam-v1:node-c", "deviceUsage", "upd-1")
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := instanceObject("upd", 3)
			setSpec(obj, "node-a", "deviceUsage", "upd-2")
			created, err := instances.Create(t.Context(), obj, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { instances.Delete(context.Background(), "upd", metav1.DeleteOptions{}) })
			tt.edit(created)
			_, err = instances.Update(t.Context(), created, metav1.UpdateOptions{})
			if tt.field == "" {
				if err != nil {
					t.Fatalf("update refused: %v", err)
				}
				return
			}
			wantInvalid(t, err, tt.field)
		})
	}
}

// testApplyOwnership has two nodes claim one slot each by server-side
// apply: each apply names only its own key, and the granular map keeps
// the other's.
func testApplyOwnership(t *testing.T, instances dynamic.ResourceInterface) {
	obj := instanceObject("cam-apply", 2)
	setSpec(obj, nil, "deviceUsage")
	if _, err := instances.Create(t.Context(), obj, metav1.CreateOptions{FieldManager: "observer"}); err != nil {
		t.Fatal(err)
	}
	apply := func(manager string, usage map[string]any) map[string]string {
		t.Helper()
		patch, err := json.Marshal(map[string]any{
			"apiVersion": "cdi.local/v1alpha1", "kind": "Instance",
			"metadata": map[string]any{"name": "cam-apply"},
			"spec":     map[string]any{"deviceUsage": usage},
		})
		if err != nil {
			t.Fatal(err)
		}
		got, err := instances.Patch(t.Context(), "cam-apply", types.ApplyPatchType, patch, metav1.PatchOptions{FieldManager: manager})
		if err != nil {
			t.Fatalf("apply by %s: %v", manager, err)
		}
		out, _, err := unstructured.NestedStringMap(got.Object, "spec", "deviceUsage")
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	apply("node-a", map[string]any{"cam-apply-0": "node-a"})
	got := apply("node-b", map[string]any{"cam-apply-1": "C:cam-v1:node-b"})
	if want := map[string]string{"cam-apply-0": "node-a", "cam-apply-1": "C:cam-v1:node-b"}; !reflect.DeepEqual(got, want) {
		t.Errorf("after both applies: %v, want %v", got, want)
	}
	// node-b releasing its key by leaving it out removes only that key.
	got = apply("node-b", map[string]any{})
	if want := map[string]string{"cam-apply-0": "node-a"}; !reflect.DeepEqual(got, want) {
		t.Errorf("after node-b's release: %v, want %v", got, want)
	}
}

// testIdentities checks each token is its user, and that RBAC is on: a
// user without a binding may not list Instances.
func testIdentities(t *testing.T, env *Env) {
	bridge, err := env.ConfigFor("bridge")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		cfg       *rest.Config
		wantGroup string
		mayList   bool
	}{
		{"admin", env.Config, "system:masters", true},
		{"bridge", bridge, "cdi:bridges", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client, err := dynamic.NewForConfig(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			review := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview",
			}}
			got, err := client.Resource(reviewsGVR).Create(t.Context(), review, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			user, _, _ := unstructured.NestedString(got.Object, "status", "userInfo", "username")
			groups, _, _ := unstructured.NestedStringSlice(got.Object, "status", "userInfo", "groups")
			if user != tt.name || !slices.Contains(groups, tt.wantGroup) {
				t.Errorf("authenticated as %q in %v, want %q in %s", user, groups, tt.name, tt.wantGroup)
			}
			_, err = client.Resource(instancesGVR).Namespace(namespace).List(t.Context(), metav1.ListOptions{})
			if tt.mayList && err != nil || !tt.mayList && !apierrors.IsForbidden(err) {
				t.Errorf("listing instances: %v, want allowed %v", err, tt.mayList)
			}
		})
	}
	if _, err := env.ConfigFor("nobody"); !errors.Is(err, ErrUnknownUser) {
		t.Errorf("ConfigFor(nobody): %v, want %v", err, ErrUnknownUser)
	}
}

// testStop checks that Stop leaves neither process nor listener behind.
func testStop(t *testing.T, env *Env) {
	pids := []int{env.etcd.cmd.Process.Pid, env.apiserver.cmd.Process.Pid}
	if etcd, apiserver := env.PIDs(); etcd != pids[0] || apiserver != pids[1] {
		t.Errorf("PIDs() = %d, %d; want %v", etcd, apiserver, pids)
	}
	if err := env.Stop(); err != nil {
		t.Fatal(err)
	}
	if etcd, apiserver := env.PIDs(); etcd != 0 || apiserver != 0 {
		t.Errorf("PIDs() after Stop = %d, %d; want 0, 0", etcd, apiserver)
	}
	for _, pid := range pids {
		if err := syscall.Kill(-pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process group %d after Stop: %v, want %v", pid, err, syscall.ESRCH)
		}
	}
	host, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	if conn, err := net.Dial("tcp", host.Host); err == nil {
		conn.Close()
		t.Errorf("%s still accepts connections after Stop", host.Host)
	}
	if _, err := os.Stat(filepath.Join(env.Dir, "etcd")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("etcd's data after Stop: %v, want it removed", err)
	}
	if err := env.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

func TestRunWithoutEtcd(t *testing.T) {
	_, err := Run(t.Context(), Options{Etcd: filepath.Join(t.TempDir(), "etcd"), Dir: t.TempDir()})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("got %v, want %v", err, ErrUnavailable)
	}
	if !strings.Contains(err.Error(), "etcd-server") {
		t.Errorf("%v: does not say what to install", err)
	}
}

// TestSourceKey checks that a cached kube-apiserver is reused exactly
// while its sources stay the same.
func TestSourceKey(t *testing.T) {
	files := []string{"go.mod", "go.sum", filepath.Join(apiserverMain, "main.go")}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, apiserverMain), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	base, err := sourceKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := sourceKey(dir); err != nil || again != base {
		t.Fatalf("same sources: %q, %v, want %q", again, err, base)
	}
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			path := filepath.Join(dir, f)
			if err := os.WriteFile(path, []byte(f+" changed"), 0o644); err != nil {
				t.Fatal(err)
			}
			defer os.WriteFile(path, []byte(f), 0o644)
			if changed, err := sourceKey(dir); err != nil || changed == base {
				t.Errorf("after changing %s: %q, %v, want a key other than %q", f, changed, err, base)
			}
		})
	}
}

// nodeUser is a kubelet's identity, which only the Node authorizer gives
// rights to: RBAC binds nothing to the system:nodes group.
const nodeUser = "system:node:n1"

// testExtraArgs checks Options.ExtraArgs by their effect: the node may
// create its own Node object (the Node authorizer, not RBAC alone) and no
// other (the NodeRestriction admission plugin).
func testExtraArgs(t *testing.T, env *Env) {
	cfg, err := env.ConfigFor(nodeUser)
	if err != nil {
		t.Fatal(err)
	}
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	nodes := client.Resource(schema.GroupVersionResource{Version: "v1", Resource: "nodes"})
	for _, tt := range []struct {
		name    string
		allowed bool
	}{{"n1", true}, {"n2", false}} {
		node := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Node"}}
		node.SetName(tt.name)
		_, err := nodes.Create(t.Context(), node, metav1.CreateOptions{})
		if tt.allowed && err != nil || !tt.allowed && !apierrors.IsForbidden(err) {
			t.Errorf("%s creating Node %s: %v, want allowed %v", nodeUser, tt.name, err, tt.allowed)
		}
	}
}
