package deploy

import (
	"encoding/json"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/cdiexec/cdi/plugins/exectest"
)

// binDir holds cdi-bridge, cdi-install and the endpoint plugin, built
// from this tree.
var binDir string

func TestMain(m *testing.M) {
	exectest.MainDir(m, &binDir, "github.com/cdiexec/cdi/bridge/cmd/cdi-bridge",
		"github.com/cdiexec/cdi/bridge/deploy/cdi-install", "github.com/cdiexec/cdi/plugins/endpoint",
		"github.com/cdiexec/cdi/plugins/generic-tty")
}

// The parts of a DaemonSet the tests look at, decoded from the rendered
// object (encoding/json matches the field names regardless of case).
type daemonSet struct {
	Spec struct {
		UpdateStrategy struct {
			Type          string
			RollingUpdate struct{ MaxUnavailable, MaxSurge any }
		}
		Template struct{ Spec podSpec }
	}
}

type podSpec struct {
	ServiceAccountName, PriorityClassName string
	ShareProcessNamespace                 bool
	NodeSelector                          map[string]string
	Tolerations                           []map[string]any
	InitContainers, Containers            []container
	Volumes                               []struct {
		Name      string
		HostPath  *struct{ Path, Type string }
		ConfigMap *struct {
			Name  string
			Items []struct{ Key, Path string }
		}
	}
}

type container struct {
	Name, Image, ImagePullPolicy string
	Command, Args                []string
	Resources                    map[string]any
	Env                          []envVar
	Ports                        []struct {
		Name          string
		ContainerPort int
	}
	ReadinessProbe, LivenessProbe, StartupProbe *probe
	VolumeMounts                                []struct {
		Name, MountPath, RecursiveReadOnly string
		ReadOnly                           bool
	}
}

type envVar struct {
	Name      string
	ValueFrom *struct{ FieldRef *struct{ FieldPath string } }
}

type probe struct {
	HTTPGet *struct {
		Path string
		Port any
	}
}

// mustRender renders this directory's kustomization.
func mustRender(t *testing.T) (*kustomization, []*unstructured.Unstructured) {
	t.Helper()
	k, objs, err := render(".")
	if err != nil {
		t.Fatal(err)
	}
	return k, objs
}

// only returns the one object of kind.
func only(t *testing.T, objs []*unstructured.Unstructured, kind string) *unstructured.Unstructured {
	t.Helper()
	var found []*unstructured.Unstructured
	for _, obj := range objs {
		if obj.GetKind() == kind {
			found = append(found, obj)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d objects of kind %s, want one", len(found), kind)
	}
	return found[0]
}

func decodeDaemonSet(t *testing.T, objs []*unstructured.Unstructured) *daemonSet {
	t.Helper()
	data, err := json.Marshal(only(t, objs, "DaemonSet").Object)
	ds := &daemonSet{}
	if err == nil {
		err = json.Unmarshal(data, ds)
	}
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// containerNamed returns the pod's (init) container of that name.
func (p *podSpec) containerNamed(t *testing.T, name string) *container {
	t.Helper()
	for _, list := range [][]container{p.Containers, p.InitContainers} {
		if i := slices.IndexFunc(list, func(c container) bool { return c.Name == name }); i >= 0 {
			return &list[i]
		}
	}
	t.Fatalf("no container %s", name)
	return nil
}

// hostPathAt returns the host path mounted at mountPath in c, and whether
// read-only; "" when mountPath is no host path's mount point.
func (p *podSpec) hostPathAt(c *container, mountPath string) (string, bool) {
	for _, m := range c.VolumeMounts {
		if path.Clean(m.MountPath) != path.Clean(mountPath) {
			continue
		}
		for _, v := range p.Volumes {
			if v.Name == m.Name && v.HostPath != nil {
				return v.HostPath.Path, m.ReadOnly
			}
		}
	}
	return "", false
}

var flagArg = regexp.MustCompile(`^--([a-z][a-z0-9-]*)=(.*)$`)

// flags parses args, every one of which must be --name=value (a value
// can then never be taken for a flag) and known to bin.
func flags(t *testing.T, bin string, args []string) map[string]string {
	t.Helper()
	known := knownFlags(t, bin)
	out := map[string]string{}
	for _, a := range args {
		m := flagArg.FindStringSubmatch(a)
		switch {
		case m == nil:
			t.Errorf("%s: argument %q is not --name=value", bin, a)
		case !known[m[1]]:
			t.Errorf("%s has no flag --%s (its flags: %v)", bin, m[1], known)
		case out[m[1]] != "":
			t.Errorf("%s: --%s given twice", bin, m[1])
		default:
			out[m[1]] = m[2]
		}
	}
	return out
}

// knownFlags runs bin -help, the built program's own word on its flags.
func knownFlags(t *testing.T, bin string) map[string]bool {
	t.Helper()
	out, err := exec.Command(binPath(bin), "-help").CombinedOutput()
	if err != nil {
		t.Fatalf("%s -help: %v\n%s", bin, err, out)
	}
	known := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+-([a-z][a-z0-9-]*)`).FindAllStringSubmatch(string(out), -1) {
		known[m[1]] = true
	}
	if len(known) == 0 {
		t.Fatalf("%s -help lists no flags:\n%s", bin, out)
	}
	return known
}

func binPath(name string) string { return filepath.Join(binDir, name) }

// makeImage is the image `make image` tags by default (IMAGE ?= ...).
func makeImage(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^IMAGE\s*\?=\s*(\S+)`).FindSubmatch(data)
	if m == nil {
		t.Fatal("the Makefile sets no IMAGE ?= default")
	}
	return string(m[1])
}
