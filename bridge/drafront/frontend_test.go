package drafront

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kwait "k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/cdiexec/cdi/bridge/cdispec"
	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/bridge/dradevices"
	"github.com/cdiexec/cdi/bridge/instance/local"
	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
	"github.com/cdiexec/cdi/bridge/internal/testing/kubelettest"
	"github.com/cdiexec/cdi/bridge/internal/testing/schedtest"
	"github.com/cdiexec/cdi/plugins/exectest"
)

// wait bounds the tests' waits for the API server and the plugins.
const wait = time.Minute

// pluginDir holds the real generic-tty plugin, built once.
var pluginDir string

func TestMain(m *testing.M) {
	exectest.MainDir(m, &pluginDir, "github.com/cdiexec/cdi/plugins/generic-tty")
}

// rig is a FrontEnd's surroundings: a drop-in of the fixture's terminals
// tty43 and tty44, its checkpoint and CDI spec directory, and the
// kubelet's plugin directories.
type rig struct {
	confDir, checkpoint, cdiDir string
	pluginDir, registrarDir     string
}

func newRig(t *testing.T) *rig {
	t.Helper()
	r := &rig{confDir: t.TempDir(), checkpoint: filepath.Join(t.TempDir(), "claims.json"), cdiDir: t.TempDir()}
	dra := kubelettest.SocketDir(t, "dra")
	r.pluginDir, r.registrarDir = filepath.Join(dra, "plugin"), filepath.Join(dra, "registry")
	if err := os.Mkdir(r.registrarDir, 0o700); err != nil {
		t.Fatal(err)
	}
	conf := exectest.Conf(t, "0.1.0", "tty", "generic-tty", map[string]any{
		"root": exectest.FixtureRoot(t), "stateDir": exectest.StateDir(t), "num_system_reserved": 42})
	if err := os.MkdirAll(filepath.Join(r.confDir, "tty.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.confDir, "tty.d", "generic.conf"), conf, 0o644); err != nil {
		t.Fatal(err)
	}
	return r
}

// config is the Config of a front end of node n1 in r, with client.
func (r *rig) config(t *testing.T, client kubernetes.Interface) Config {
	t.Helper()
	dir, err := cdispec.Open(r.cdiDir, "cdi.test")
	if err != nil {
		t.Fatal(err)
	}
	return Config{NodeName: "n1", Driver: "cdi.test", Client: client, CDI: dir, Checkpoint: r.checkpoint,
		PluginDir: r.pluginDir, RegistrarDir: r.registrarDir, Store: local.New(filepath.Join(t.TempDir(), "instances.json")),
		Logger: slog.New(slog.DiscardHandler)}
}

// discover is the drop-in's pools, as discovery hands them over.
func (r *rig) discover(t *testing.T) []discovery.Pool {
	t.Helper()
	pools, err := (&discovery.Discoverer{ConfDir: r.confDir, PluginDirs: []string{pluginDir}}).Discover(t.Context())
	if err != nil || len(pools) != 1 {
		t.Fatalf("discovery: %v, %v", pools, err)
	}
	return pools
}

// Against a real API server, as a user with the shipped DRA role only:
// the pools handed over are published in the node's slices, the driver's
// registration socket is served, and a claim prepared before the start
// that the API server no longer has is unprepared, its spec removed.
func TestFrontEnd(t *testing.T) {
	env := apitest.Start(t, apitest.Options{Users: []apitest.User{{Name: "bridge"}}})
	admin, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	schedtest.BindDRARole(t, admin, "bridge")
	if _, err := admin.CoreV1().Nodes().Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := env.ConfigFor("bridge")
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := newRig(t)
	gone := filepath.Join(r.cdiDir, dradevices.SpecFile("gone"))
	writeFile(t, r.checkpoint, `{"version":1,"claims":{"gone":{"namespace":"ns","name":"gone","devices":[`+
		`{"request":"r","pool":"tty-generic","device":"tty43","id":"tty43","resource":"tty","requestId":"gone-0"}]}}}`)
	writeFile(t, gone, `{"cdiVersion":"0.3.0","kind":"cdi.test/claim","devices":[]}`)

	f, err := Start(t.Context(), r.config(t, client))
	if err != nil {
		t.Fatal(err)
	}
	_, viaDRA := Split(r.discover(t), ParsePools("tty-generic"))
	f.SetPools(viaDRA)
	err = kwait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, wait, true, func(ctx context.Context) (bool, error) {
		l, err := admin.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=cdi.test"})
		if err != nil || len(l.Items) != 1 {
			return false, nil
		}
		s := l.Items[0].Spec
		return s.Pool.Name == "n1/tty-generic" && len(s.Devices) == 2, nil
	})
	if err != nil {
		t.Errorf("the node's slice of its two terminals: %v", err)
	}
	err = kwait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, wait, true, func(context.Context) (bool, error) {
		c, err := dradevices.LoadCheckpoint(r.checkpoint)
		_, statErr := os.Stat(gone)
		return err == nil && len(c.UIDs()) == 0 && errors.Is(statErr, os.ErrNotExist), nil
	})
	if err != nil {
		t.Errorf("the deleted claim is still prepared: %v", err)
	}
	if _, err := os.Stat(filepath.Join(r.registrarDir, "cdi.test-reg.sock")); err != nil {
		t.Errorf("the DRA driver's registration socket: %v", err)
	}
}

// Start refuses a Config that lacks what it needs, and a checkpoint it
// cannot read.
func TestStartRefuses(t *testing.T) {
	r := newRig(t)
	good := r.config(t, fake.NewClientset())
	for name, tc := range map[string]struct {
		edit func(*Config)
		want error
	}{
		"no client":                    {func(c *Config) { c.Client = nil }, ErrConfig},
		"no store":                     {func(c *Config) { c.Store = nil }, ErrConfig},
		"a checkpoint that is no file": {func(c *Config) { c.Checkpoint = "/" }, dradevices.ErrCheckpoint},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := good
			tc.edit(&cfg)
			if f, err := Start(t.Context(), cfg); !errors.Is(err, tc.want) || f != nil {
				t.Errorf("Start = %v, %v; want %v", f, err, tc.want)
			}
		})
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
