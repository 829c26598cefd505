package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

type options struct{ out, tag, arch, repo string }

// Where things go in the image.
const (
	toolDir   = "usr/local/bin"
	pluginDir = "opt/cdi/bin"
	// DropInDir holds the default drop-ins the DaemonSet's init step
	// copies onto the host, leaving the host's own alone.
	dropInDir = "usr/share/cdi/conf.d"
)

// tools are the commands the image carries besides the plugins.
var tools = map[string]string{"cdi-bridge": "./bridge/cmd/cdi-bridge", "cditool": "./spec/cmd/cditool", "cdi-install": "./bridge/deploy/cdi-install"}

// build compiles the binaries, builds the image and writes the tarball.
// It returns the image's digest.
func build(o options, log io.Writer) (v1.Hash, error) {
	bin, err := os.MkdirTemp("", "cdi-image-")
	if err != nil {
		return v1.Hash{}, err
	}
	defer os.RemoveAll(bin)
	files, err := compile(o, bin, log)
	if err != nil {
		return v1.Hash{}, err
	}
	dropIns, err := dropIns(filepath.Join(o.repo, "conf.d"))
	if err != nil {
		return v1.Hash{}, err
	}
	for k, v := range dropIns {
		files[k] = v
	}
	img, err := image(files, o.arch)
	if err != nil {
		return v1.Hash{}, err
	}
	tag, err := name.NewTag(o.tag)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("-tag: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(o.out), 0o755); err != nil {
		return v1.Hash{}, err
	}
	if err := tarball.WriteToFile(o.out, tag, img); err != nil {
		return v1.Hash{}, fmt.Errorf("writing %s: %w", o.out, err)
	}
	return img.Digest()
}

// file is one file of the image's layer.
type file struct {
	data []byte
	mode int64
}

// compile builds every plugin (each plugins/<name>/main.go) and tool as a
// static, stripped linux binary and returns them by image path.
func compile(o options, bin string, log io.Writer) (map[string]file, error) {
	mains, err := filepath.Glob(filepath.Join(o.repo, "plugins", "*", "main.go"))
	if err != nil {
		return nil, err
	}
	pkgs := map[string]string{} // image path -> package
	for _, m := range mains {
		n := filepath.Base(filepath.Dir(m))
		pkgs[path.Join(pluginDir, n)] = "./plugins/" + n
	}
	for n, pkg := range tools {
		pkgs[path.Join(toolDir, n)] = pkg
	}
	out := map[string]file{}
	for imgPath, pkg := range pkgs {
		dst := filepath.Join(bin, strings.ReplaceAll(imgPath, "/", "_"))
		fmt.Fprintf(log, "image: building %s for linux/%s\n", pkg, o.arch)
		cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=auto", "-ldflags=-s -buildid=", "-o", dst, pkg)
		cmd.Dir, cmd.Stderr = o.repo, log
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+o.arch)
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("building %s: %w", pkg, err)
		}
		data, err := os.ReadFile(dst)
		if err != nil {
			return nil, err
		}
		out[imgPath] = file{data: data, mode: 0o755}
	}
	return out, nil
}

// dropIns reads the repository's default drop-ins (conf.d/<type>.d/*.conf).
func dropIns(dir string) (map[string]file, error) {
	out := map[string]file{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".conf") {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		out[path.Join(dropInDir, filepath.ToSlash(rel))] = file{data: data, mode: 0o644}
		return err
	})
	return out, err
}

// image lays files onto an empty base as one layer, with fixed times so
// that the digest depends on the contents alone.
func image(files map[string]file, arch string) (v1.Image, error) {
	layerTar, err := tarOf(files)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	cf.Config.Entrypoint = []string{"/" + path.Join(toolDir, "cdi-bridge")}
	cf.Config.Env = []string{"PATH=/" + toolDir + ":/" + pluginDir}
	cf.Config.Labels = map[string]string{"org.opencontainers.image.title": "cdi-bridge",
		"org.opencontainers.image.description": "CDI plugins exposed to the kubelet as device plugins"}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	return mutate.CreatedAt(img, v1.Time{Time: time.Unix(0, 0).UTC()})
}

// tarOf writes files, and the directories above them, as a tar stream in
// name order with every time at the epoch and root ownership.
func tarOf(files map[string]file) ([]byte, error) {
	names := make([]string, 0, len(files))
	dirs := map[string]bool{}
	for n := range files {
		names = append(names, n)
		for d := path.Dir(n); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	for d := range dirs {
		names = append(names, d+"/")
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		h := &tar.Header{Name: n, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		if strings.HasSuffix(n, "/") {
			h.Typeflag, h.Mode = tar.TypeDir, 0o755
		} else {
			f := files[n]
			h.Typeflag, h.Mode, h.Size = tar.TypeReg, f.mode, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if !strings.HasSuffix(n, "/") {
			if _, err := tw.Write(files[n].data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
