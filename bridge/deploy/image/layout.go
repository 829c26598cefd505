package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Annotations of index.json's entries that name an image. containerd
// (ctr images import, and so kind load) takes the first, a full
// reference; other tools (skopeo, podman) the second, the tag.
const (
	containerdName = "io.containerd.image.name"
	ociRefName     = "org.opencontainers.image.ref.name"
)

// index is an OCI image index of imgs, each under its config's platform.
func index(imgs []v1.Image) (v1.ImageIndex, error) {
	var adds []mutate.IndexAddendum
	for _, img := range imgs {
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, err
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			MediaType: types.OCIManifestSchema1,
			Platform:  &v1.Platform{OS: cf.OS, Architecture: cf.Architecture},
		}})
	}
	return mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...), nil
}

// notInTag is what an image tag cannot hold: the "+dirty" of a Go
// pseudo-version, say.
var notInTag = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

// imageNames are tag, fully qualified as containerd and the CRI name
// images (cdi-bridge:dev is docker.io/library/cdi-bridge:dev), and the
// same repository tagged with version.
func imageNames(tag, version string) ([]string, error) {
	t, err := name.NewTag(tag)
	if err != nil {
		return nil, fmt.Errorf("-tag: %w", err)
	}
	v := strings.TrimLeft(notInTag.ReplaceAllString(version, "-"), ".-")
	v = v[:min(len(v), 128)]
	versioned, err := name.NewTag(t.Repository.Name() + ":" + v)
	if err != nil {
		return nil, fmt.Errorf("the version %q as a tag: %w", version, err)
	}
	names := []string{fullName(t), fullName(versioned)}
	if names[0] == names[1] {
		names = names[:1]
	}
	return names, nil
}

// fullName is t as containerd names it: Docker Hub's images are
// docker.io/<repository>, not index.docker.io/ as go-containerregistry
// has them, and a name ctr imports is not normalized.
func fullName(t name.Tag) string {
	registry := t.RegistryStr()
	if registry == name.DefaultRegistry {
		registry = "docker.io"
	}
	return registry + "/" + t.RepositoryStr() + ":" + t.TagStr()
}

// writeLayout writes idx as an OCI image layout, named by each of names,
// into a tarball at out, every time in it at the epoch.
func writeLayout(out string, idx v1.ImageIndex, names []string) error {
	dir, err := os.MkdirTemp("", "cdi-image-layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	for _, n := range names {
		ref, err := name.NewTag(n)
		if err != nil {
			return err
		}
		annotations := map[string]string{containerdName: n, ociRefName: ref.TagStr()}
		if err := p.AppendIndex(idx, layout.WithAnnotations(annotations)); err != nil {
			return err
		}
	}
	files, err := readTree(dir)
	if err != nil {
		return err
	}
	data, err := tarOf(files)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	return os.WriteFile(out, data, 0o644)
}

// readTree reads every regular file under dir, by slash path.
func readTree(dir string) (map[string]file, error) {
	files := map[string]file{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		files[filepath.ToSlash(rel)] = file{data: data, mode: 0o644}
		return err
	})
	return files, err
}
