package main

import (
	"archive/tar"
	"bytes"
	"context"
	debugbuildinfo "debug/buildinfo"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/cdiexec/cdi/bridge/deploy/internal/nodedefaults"
	"github.com/cdiexec/cdi/internal/gobuild"
	"github.com/cdiexec/cdi/spec/buildinfo"
)

type options struct {
	// out is the OCI image layout tarball to write.
	out string
	// tag names the image besides <its repository>:<build version>.
	tag    string
	arches []string
	repo   string
	// only, when not empty, names the image paths of the binaries to
	// build (opt/cdi/bin/generic-tty): a test of the index checks every
	// architecture without cross-compiling every binary.
	only []string
}

// Where things go in the image.
const (
	toolDir   = "usr/local/bin"
	pluginDir = "opt/cdi/bin"
	// DropInDir holds the default drop-ins (conf.d/node-defaults.list)
	// the DaemonSet's init step copies onto the host, leaving the host's
	// own alone.
	dropInDir = "usr/share/cdi/conf.d"
)

// tools are the commands the image carries besides the plugins.
var tools = map[string]string{"cdi-bridge": "./bridge/cmd/cdi-bridge", "cditool": "./spec/cmd/cditool", "cdi-install": "./bridge/deploy/cdi-install"}

// built is what build wrote.
type built struct {
	// Index is the digest of the image index, the image's digest for
	// every platform.
	Index v1.Hash
	// Names are the references the layout names the index by.
	Names []string
}

// build compiles the binaries for every architecture, builds an image of
// each, and writes their index as an OCI image layout tarball, named by
// o.tag and by the image's repository with the build's version as tag.
func build(o options, log io.Writer) (built, error) {
	dropIns, err := dropIns(filepath.Join(o.repo, "conf.d"))
	if err != nil {
		return built{}, err
	}
	var imgs []v1.Image
	var version string
	for _, arch := range o.arches {
		img, v, err := archImage(o, arch, dropIns, log)
		if err != nil {
			return built{}, err
		}
		if version != "" && v != version {
			return built{}, fmt.Errorf("the %s build is version %s, the others %s", arch, v, version)
		}
		imgs, version = append(imgs, img), v
	}
	names, err := imageNames(o.tag, version)
	if err != nil {
		return built{}, err
	}
	idx, err := index(imgs)
	if err != nil {
		return built{}, err
	}
	if err := writeLayout(o.out, idx, names); err != nil {
		return built{}, fmt.Errorf("writing %s: %w", o.out, err)
	}
	digest, err := idx.Digest()
	return built{Index: digest, Names: names}, err
}

// archImage compiles the binaries for arch and builds their image; it
// returns the build's version, read from its binaries.
func archImage(o options, arch string, dropIns map[string]file, log io.Writer) (v1.Image, string, error) {
	bin, err := os.MkdirTemp("", "cdi-image-")
	if err != nil {
		return nil, "", err
	}
	defer os.RemoveAll(bin)
	files, err := compile(o, arch, bin, log)
	if err != nil {
		return nil, "", err
	}
	// Every binary is built from this module at one commit: any of them
	// tells the version.
	first := slices.Min(slices.Collect(maps.Keys(files)))
	bi, err := debugbuildinfo.Read(bytes.NewReader(files[first].data))
	if err != nil {
		return nil, "", fmt.Errorf("the build information of %s for %s: %w", first, arch, err)
	}
	maps.Copy(files, dropIns)
	img, err := image(files, arch)
	return img, buildinfo.Of(bi), err
}

// file is one file of the image's layer.
type file struct {
	data []byte
	mode int64
}

// compile builds every plugin (each plugins/<name>/main.go) and tool for
// linux/arch as `make build` builds them (internal/gobuild), and returns
// them by image path.
func compile(o options, arch, bin string, log io.Writer) (map[string]file, error) {
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
	if len(o.only) > 0 {
		maps.DeleteFunc(pkgs, func(imgPath, _ string) bool { return !slices.Contains(o.only, imgPath) })
		if len(pkgs) != len(o.only) {
			return nil, fmt.Errorf("only %v: not every one is a binary of the image", o.only)
		}
	}
	out := map[string]file{}
	for imgPath, pkg := range pkgs {
		dst := filepath.Join(bin, strings.ReplaceAll(imgPath, "/", "_"))
		fmt.Fprintf(log, "image: building %s for linux/%s\n", pkg, arch)
		cmd := gobuild.Command(context.Background(), o.repo, dst, pkg)
		cmd.Stderr = log
		cmd.Env = append(cmd.Env, "GOOS=linux", "GOARCH="+arch)
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

// dropIns reads the drop-ins of dir (the repository's conf.d) that its
// node-defaults.list names: only those install on a node, so only those
// are in the image. The others are examples and test fixtures.
func dropIns(dir string) (map[string]file, error) {
	names, err := nodedefaults.Read(dir)
	if err != nil {
		return nil, err
	}
	out := map[string]file{}
	for _, n := range names {
		data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(n)))
		if err != nil {
			return nil, err
		}
		out[path.Join(dropInDir, n)] = file{data: data, mode: 0o644}
	}
	return out, nil
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
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	// OCI media types throughout: the layout's index is an OCI index.
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.AppendLayers(base, layer)
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
