package node

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"runtime"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// The pods' image: podcheck alone. Its name has a registry part, so that
// neither ctr nor the CRI rewrites it to docker.io; no registry is ever
// asked (imagePullPolicy: Never, and the sandbox image is pinned).
const (
	imageName = "cdi-e2e.local/podcheck:test"
	imageTar  = "podcheck-image.tar"
)

// writeImage writes a one-layer image holding binary as /podcheck to out,
// as the tarball `ctr images import` reads. The config names the platform:
// ctr filters out an image without one. With no arguments it sleeps, which
// makes it a sandbox image.
func writeImage(binary, out string) error {
	layer, err := layerOf(binary, "podcheck")
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config.Entrypoint = []string{"/podcheck"}
	cf.Config.Cmd = []string{"sleep"}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	tag, err := name.NewTag(imageName)
	if err != nil {
		return err
	}
	return tarball.WriteToFile(out, tag, img)
}

// layerOf is a layer with the file at path as /<as>, executable.
func layerOf(path, as string) (v1.Layer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	h := &tar.Header{Name: as, Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(data)), ModTime: time.Unix(0, 0)}
	if err := tw.WriteHeader(h); err != nil {
		return nil, err
	}
	if _, err := tw.Write(data); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(buf.Bytes())), nil
	})
}
