package deploy

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/cdiexec/cdi/bridge/deploy/internal/nodedefaults"
)

// imageLayout reads where the image builder (image/build.go) puts things:
// its toolDir, pluginDir and dropInDir constants, relative to the image's
// root.
func imageLayout(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "image/build.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	layout := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		spec, ok := n.(*ast.ValueSpec)
		if !ok || len(spec.Names) != 1 || len(spec.Values) != 1 {
			return true
		}
		if lit, ok := spec.Values[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
			layout[spec.Names[0].Name], _ = strconv.Unquote(lit.Value)
		}
		return true
	})
	for _, name := range []string{"toolDir", "pluginDir", "dropInDir"} {
		if layout[name] == "" {
			t.Fatalf("image/build.go has no constant %s", name)
		}
	}
	return layout
}

// TestInstallStep runs the init container's command line, its paths
// moved under a temporary root laid out as the image is, twice: it must
// copy the plugins and the repository's default drop-ins (those of
// conf.d/node-defaults.list) to where the bridge container's host paths
// are.
func TestInstallStep(t *testing.T) {
	_, objs := mustRender(t)
	pod := &decodeDaemonSet(t, objs).Spec.Template.Spec
	install, bridge := pod.containerNamed(t, "install"), pod.containerNamed(t, "bridge")
	layout := imageLayout(t)
	if len(install.Command) == 0 || install.Command[0] != "/"+layout["toolDir"]+"/cdi-install" {
		t.Fatalf("init command %q, want /%s/cdi-install first", install.Command, layout["toolDir"])
	}
	f := flags(t, "cdi-install", install.Command[1:])
	bf := flags(t, "cdi-bridge", bridge.Args)
	// The chain image -> host -> bridge, for plugins and for drop-ins.
	for _, c := range []struct{ from, image, to, bridgeFlag string }{
		{"plugins-from", layout["pluginDir"], "plugins-to", "plugin-path"},
		{"drop-ins-from", layout["dropInDir"], "drop-ins-to", "conf-dir"},
	} {
		if f[c.from] != "/"+c.image {
			t.Errorf("--%s=%s, but the image has them in /%s", c.from, f[c.from], c.image)
		}
		host, _ := pod.hostPathAt(install, f[c.to])
		if bridgeHost, _ := pod.hostPathAt(bridge, bf[c.bridgeFlag]); host == "" || host != bridgeHost {
			t.Errorf("--%s=%s is host path %q, but the bridge's --%s is host path %q", c.to, f[c.to], host, c.bridgeFlag, bridgeHost)
		}
	}
	root := t.TempDir()
	copyFile(t, binPath("endpoint"), filepath.Join(root, layout["pluginDir"], "endpoint"), 0o755)
	dropIns := copyDefaults(t, "../../conf.d", filepath.Join(root, layout["dropInDir"]))
	args := make([]string, 0, len(install.Command)-1)
	for name, v := range f {
		args = append(args, "--"+name+"="+filepath.Join(root, v))
	}
	for range 2 {
		if out, err := exec.Command(binPath("cdi-install"), args...).CombinedOutput(); err != nil {
			t.Fatalf("cdi-install: %v\n%s", err, out)
		}
	}
	want := []string{filepath.Join(root, f["plugins-to"], "endpoint")}
	for _, rel := range dropIns {
		want = append(want, filepath.Join(root, f["drop-ins-to"], rel))
	}
	for _, p := range want {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("not installed: %v", err)
		}
	}
}

func copyFile(t *testing.T, src, dst string, mode fs.FileMode) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err == nil {
		err = os.MkdirAll(filepath.Dir(dst), 0o755)
	}
	if err == nil {
		err = os.WriteFile(dst, data, mode)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// copyDefaults copies the drop-ins of src that its node-defaults.list
// names, as the image carries them, to dst and returns their paths
// relative to both.
func copyDefaults(t *testing.T, src, dst string) []string {
	t.Helper()
	rels, err := nodedefaults.Read(src)
	if err != nil || len(rels) == 0 {
		t.Fatalf("default drop-ins in %s: %v, %d found", src, err, len(rels))
	}
	for _, rel := range rels {
		copyFile(t, filepath.Join(src, filepath.FromSlash(rel)), filepath.Join(dst, filepath.FromSlash(rel)), 0o644)
	}
	return rels
}
