package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// machines are the ELF machines of the architectures the image is built for.
var machines = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// TestImage builds the image for this machine's architecture twice and
// reads the layout tarball the way an importer does, with nothing but the
// OCI image layout specification: index.json names the index, the index
// lists the platform, its config says its architecture, every binary and
// the safe drop-ins are in its layer, built for it, and every blob is
// what its digest says. The native binaries are those the other tests
// and the node test build too, so they come from the build cache.
func TestImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every binary, twice")
	}
	dir := t.TempDir()
	o := options{out: filepath.Join(dir, "a.tar"), tag: "example.com/cdi-bridge:test", arches: []string{runtime.GOARCH}, repo: "../../.."}
	// The build's progress goes to the test's output: on a cold build
	// cache it compiles everything, and a timeout shows how far it got.
	first, err := build(o, t.Output())
	if err != nil {
		t.Fatal(err)
	}
	o.out = filepath.Join(dir, "b.tar")
	second, err := build(o, t.Output())
	if err != nil {
		t.Fatal(err)
	}
	if first.Index != second.Index {
		t.Errorf("two builds of the same sources: digests %s and %s", first.Index, second.Index)
	}
	checkIndex(t, o.out, first, o.arches, imageFiles(allBinaries))
}

// TestImageArchitectures builds the index of both architectures `make
// image` builds, with one small plugin in each image rather than every
// binary: cross-compiling them all for arm64 took a quarter of an hour of
// a cold run on two cores, and what this test checks is the index, the
// platforms and that each image's binaries are built for its own.
func TestImageArchitectures(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-compiles a plugin")
	}
	plugin := pluginDir + "/generic-tty"
	o := options{out: filepath.Join(t.TempDir(), "a.tar"), tag: "example.com/cdi-bridge:test",
		arches: []string{"amd64", "arm64"}, repo: "../../..", only: []string{plugin}}
	b, err := build(o, t.Output())
	if err != nil {
		t.Fatal(err)
	}
	checkIndex(t, o.out, b, o.arches, imageFiles([]string{plugin}))
}

// allBinaries are the image paths of every binary the image carries.
var allBinaries = []string{
	"usr/local/bin/cdi-bridge", "usr/local/bin/cditool", "usr/local/bin/cdi-install",
	"opt/cdi/bin/drm", "opt/cdi/bin/generic", "opt/cdi/bin/generic-tty", "opt/cdi/bin/endpoint",
}

// imageFiles is what a layer must hold: binaries (true) and the safe
// drop-ins (false).
func imageFiles(binaries []string) map[string]bool {
	want := map[string]bool{}
	for _, b := range binaries {
		want[b] = true
	}
	for _, n := range safeDropIns {
		want[dropInDir+"/"+n] = false
	}
	return want
}

// checkIndex reads the layout at path and checks the index b wrote in it:
// a platform for each of arches, in order, and each platform's image
// with the files want.
func checkIndex(t *testing.T, path string, b built, arches []string, want map[string]bool) {
	t.Helper()
	l := readLayout(t, path)
	idx := l.names(t, b.Names)
	if idx.Digest != b.Index || idx.MediaType != types.OCIImageIndex {
		t.Fatalf("index.json names %s (%s), want the index %s", idx.Digest, idx.MediaType, b.Index)
	}
	var index v1.IndexManifest
	l.decode(t, idx, &index)
	var platforms []string
	for _, m := range index.Manifests {
		if m.Platform == nil || m.MediaType != types.OCIManifestSchema1 {
			t.Fatalf("index entry %s: media type %s, platform %v", m.Digest, m.MediaType, m.Platform)
		}
		platforms = append(platforms, m.Platform.OS+"/"+m.Platform.Architecture)
		t.Run(m.Platform.Architecture, func(t *testing.T) { l.checkImage(t, m, maps.Clone(want)) })
	}
	var wantPlatforms []string
	for _, a := range arches {
		wantPlatforms = append(wantPlatforms, "linux/"+a)
	}
	if !slices.Equal(platforms, wantPlatforms) {
		t.Errorf("the index lists %v, want %v", platforms, wantPlatforms)
	}
}

// eachTarEntry calls fn with every entry of the tar stream r, and a
// reader of its content.
func eachTarEntry(t *testing.T, r io.Reader, fn func(h *tar.Header, content io.Reader)) {
	t.Helper()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		fn(h, tr)
	}
}

// layoutFiles are the files of an OCI image layout tarball, by path.
type layoutFiles map[string][]byte

// readLayout reads the tarball at path; every blob's content must hash
// to its name.
func readLayout(t *testing.T, path string) layoutFiles {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	l := layoutFiles{}
	eachTarEntry(t, f, func(h *tar.Header, content io.Reader) {
		if h.Typeflag != tar.TypeReg {
			return
		}
		data, err := io.ReadAll(content)
		if err != nil {
			t.Fatal(err)
		}
		l[h.Name] = data
	})
	var marker struct{ ImageLayoutVersion string }
	if err := json.Unmarshal(l["oci-layout"], &marker); err != nil || marker.ImageLayoutVersion != "1.0.0" {
		t.Errorf("oci-layout %q (%v), want version 1.0.0", l["oci-layout"], err)
	}
	for name, data := range l {
		if hexDigest, ok := strings.CutPrefix(name, "blobs/sha256/"); ok {
			if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != hexDigest {
				t.Errorf("%s holds content of digest sha256:%x", name, sum)
			}
		}
	}
	return l
}

// names checks that index.json names one descriptor by each of names, as
// containerd and the OCI annotation read them, and returns it.
func (l layoutFiles) names(t *testing.T, names []string) v1.Descriptor {
	var top v1.IndexManifest
	if err := json.Unmarshal(l["index.json"], &top); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range top.Manifests {
		if d.Digest != top.Manifests[0].Digest {
			t.Errorf("index.json names two images: %s and %s", d.Digest, top.Manifests[0].Digest)
		}
		if !strings.HasSuffix(d.Annotations[containerdName], ":"+d.Annotations[ociRefName]) {
			t.Errorf("names %q and tag %q disagree", d.Annotations[containerdName], d.Annotations[ociRefName])
		}
		got = append(got, d.Annotations[containerdName])
	}
	want := []string{"example.com/cdi-bridge:test", "example.com/cdi-bridge:"}
	if len(got) != 2 || got[0] != want[0] || !strings.HasPrefix(got[1], want[1]) || !slices.Equal(got, names) {
		t.Fatalf("index.json names %q, want %q and a version tag, as build said (%q)", got, want[0], names)
	}
	return top.Manifests[0]
}

// blob returns d's content, checking its size.
func (l layoutFiles) blob(t *testing.T, d v1.Descriptor) []byte {
	t.Helper()
	data, ok := l["blobs/"+d.Digest.Algorithm+"/"+d.Digest.Hex]
	if !ok || int64(len(data)) != d.Size {
		t.Fatalf("blob %s: present %v, %d bytes, want %d", d.Digest, ok, len(data), d.Size)
	}
	return data
}

func (l layoutFiles) decode(t *testing.T, d v1.Descriptor, v any) {
	t.Helper()
	if err := json.Unmarshal(l.blob(t, d), v); err != nil {
		t.Fatalf("%s: %v", d.Digest, err)
	}
}

// checkImage checks one platform's manifest, config and layer, which
// must hold the files want.
func (l layoutFiles) checkImage(t *testing.T, d v1.Descriptor, want map[string]bool) {
	var m v1.Manifest
	l.decode(t, d, &m)
	var cf v1.ConfigFile
	l.decode(t, m.Config, &cf)
	arch := d.Platform.Architecture
	if cf.OS != "linux" || cf.Architecture != arch || !slices.Equal(cf.Config.Entrypoint, []string{"/usr/local/bin/cdi-bridge"}) {
		t.Errorf("config: os %s arch %s entrypoint %v, want linux %s", cf.OS, cf.Architecture, cf.Config.Entrypoint, arch)
	}
	if len(m.Layers) != 1 || m.Layers[0].MediaType != types.OCILayer || len(cf.RootFS.DiffIDs) != 1 {
		t.Fatalf("layers %v, diff ids %v; want one gzipped OCI layer on an empty base", m.Layers, cf.RootFS.DiffIDs)
	}
	zr, err := gzip.NewReader(bytes.NewReader(l.blob(t, m.Layers[0])))
	if err != nil {
		t.Fatal(err)
	}
	layer, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(layer); "sha256:"+hex.EncodeToString(sum[:]) != cf.RootFS.DiffIDs[0].String() {
		t.Errorf("the layer's diff id is %s, its content's digest sha256:%x", cf.RootFS.DiffIDs[0], sum)
	}
	checkLayer(t, bytes.NewReader(layer), machines[arch], want)
}

// safeDropIns are the drop-ins a node gets by default, written out here
// rather than read from conf.d/node-defaults.list: a drop-in added to the
// list fails this test until someone has asked whether it is safe to
// hand to a pod on every node (it finds real hardware, and a pod given
// it cannot reach the host's own consoles or the like).
var safeDropIns = []string{"dev.d/generic.conf", "gpu.d/drm.conf"}

// checkLayer wants the files of want there, every binary (true) static,
// executable and built for machine, and the safe drop-ins and no other.
func checkLayer(t *testing.T, r io.Reader, machine elf.Machine, want map[string]bool) {
	eachTarEntry(t, r, func(h *tar.Header, content io.Reader) {
		binary, ok := want[h.Name]
		if !ok {
			if strings.HasPrefix(h.Name, dropInDir+"/") && h.Typeflag == tar.TypeReg {
				t.Errorf("%s: a drop-in not among the safe defaults %q", h.Name, safeDropIns)
			}
			return
		}
		delete(want, h.Name)
		if h.Uid != 0 || h.Gid != 0 || h.ModTime.Unix() != 0 {
			t.Errorf("%s: owner %d:%d, time %v; want root and the epoch", h.Name, h.Uid, h.Gid, h.ModTime)
		}
		if !binary {
			return
		}
		data, err := io.ReadAll(content)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkBinary(data, machine); h.Mode&0o111 == 0 || err != nil {
			t.Errorf("%s: mode %o, %v; want an executable static binary", h.Name, h.Mode, err)
		}
	})
	for n := range want {
		t.Errorf("%s missing from the image", n)
	}
}

// checkBinary says why an ELF binary is not one for machine that needs no
// dynamic loader (the image has no libc).
func checkBinary(data []byte, machine elf.Machine) error {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return err
	}
	defer f.Close()
	if f.Machine != machine {
		return fmt.Errorf("built for %v, want %v", f.Machine, machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return errors.New("dynamically linked")
		}
	}
	return nil
}

// TestImageNames: the version becomes a tag even where it holds what a
// tag cannot.
func TestImageNames(t *testing.T) {
	for _, tc := range []struct{ tag, version string }{
		{"cdi-bridge:dev", "v0.0.0-20261123211542-155aa5c82905+dirty"},
		{"registry.example:5000/cdi/cdi-bridge:v0.1.0", "v0.1.0"},
		{"cdi-bridge", "0451bcb6a1b2-dirty"},
	} {
		t.Run(tc.version, func(t *testing.T) {
			names, err := imageNames(tc.tag, tc.version)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string][]string{
				"v0.0.0-20261123211542-155aa5c82905+dirty": {"docker.io/library/cdi-bridge:dev", "docker.io/library/cdi-bridge:v0.0.0-20261123211542-155aa5c82905-dirty"},
				"v0.1.0":             {"registry.example:5000/cdi/cdi-bridge:v0.1.0"},
				"0451bcb6a1b2-dirty": {"docker.io/library/cdi-bridge:latest", "docker.io/library/cdi-bridge:0451bcb6a1b2-dirty"},
			}[tc.version]
			if !slices.Equal(names, want) {
				t.Errorf("names %q, want %q", names, want)
			}
		})
	}
}

// TestDropIns: the image carries the drop-ins conf.d/node-defaults.list
// names, which are the safe ones, and a list naming a drop-in conf.d
// lacks fails the build.
func TestDropIns(t *testing.T) {
	for _, tc := range []struct {
		name string
		// files are conf.d's, by slash path; nil: the repository's.
		files   map[string]string
		want    []string
		missing bool
	}{
		{name: "the repository", want: safeDropIns},
		{name: "only the listed ones", files: map[string]string{
			"node-defaults.list": "# safe\ngpu.d/drm.conf\n", "gpu.d/drm.conf": "{}", "tty.d/generic.conf": "{}",
		}, want: []string{"gpu.d/drm.conf"}},
		{name: "a listed drop-in missing", files: map[string]string{
			"node-defaults.list": "gpu.d/drm.conf\n",
		}, missing: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := "../../../conf.d"
			if tc.files != nil {
				dir = t.TempDir()
				for n, data := range tc.files {
					p := filepath.Join(dir, filepath.FromSlash(n))
					if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			files, err := dropIns(dir)
			if tc.missing {
				if !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("dropIns: %v, want a missing file's error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for p, f := range files {
				got = append(got, strings.TrimPrefix(p, dropInDir+"/"))
				if f.mode != 0o644 {
					t.Errorf("%s: mode %o", p, f.mode)
				}
			}
			if slices.Sort(got); !slices.Equal(got, tc.want) {
				t.Errorf("the image's drop-ins %q, want %q", got, tc.want)
			}
		})
	}
}
