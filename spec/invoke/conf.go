package invoke

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/cdiexec/cdi/spec"
)

// DefaultConfDir is where the drop-ins live: <DefaultConfDir>/<type>.d/<name>.conf.
const DefaultConfDir = "/etc/cdi"

// DefaultPluginDir is where the plugin binaries live.
const DefaultPluginDir = "/opt/cdi/bin"

// Conf is one drop-in: the file it was read from and its configuration,
// whose Bytes are the file's contents, piped to the plugin unchanged.
type Conf struct {
	Path string
	spec.Config
}

// ID is the drop-in's file name without its extension: "generic" for
// /etc/cdi/tty.d/generic.conf.
func (c *Conf) ID() string {
	base := filepath.Base(c.Path)
	return strings.TrimSuffix(base, filepath.Ext(base))
}

// LoadConfs reads the drop-ins of resource-type typ, <confDir>/<typ>.d/*.conf
// and *.json, in file name order. Dot-files and other extensions are
// ignored, and a missing folder is an empty list, not an error.
//
// A file that does not load does not stop the others: LoadConfs returns every
// drop-in that loads together with an error joining one error per file that
// does not, each naming the file. A malformed file's error wraps
// spec.ErrMalformed; a file whose type differs from the folder's is a
// *spec.Error with code spec.CodeTypeMismatch.
func LoadConfs(confDir, typ string) ([]*Conf, error) {
	if err := spec.CheckResourceType(typ); err != nil {
		return nil, err
	}
	dir := filepath.Join(confDir, typ+".d")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading drop-in folder: %w", err)
	}
	var confs []*Conf
	var errs []error
	for _, e := range entries {
		if e.IsDir() || !isConfName(e.Name()) {
			continue
		}
		c, err := LoadConf(filepath.Join(dir, e.Name()), typ)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		confs = append(confs, c)
	}
	return confs, errors.Join(errs...)
}

// isConfName reports whether a file is a drop-in. ".json" is accepted beside
// the draft's ".conf" because CNI accepts both and generators often write
// ".json"; anything else (backups, ".dpkg-old", READMEs) and dot-files, such
// as an editor's swap files, are ignored.
func isConfName(name string) bool {
	if strings.HasPrefix(name, ".") {
		return false
	}
	switch filepath.Ext(name) {
	case ".conf", ".json":
		return true
	}
	return false
}

// LoadConf reads one drop-in file that lives in the folder of typ.
func LoadConf(path, typ string) (*Conf, error) {
	data, err := readLimited(path)
	if err != nil {
		return nil, err
	}
	cfg, err := spec.ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if cfg.Type != typ {
		return nil, spec.NewError(spec.CodeTypeMismatch, "%s: configuration type %q differs from its folder's type %q", path, cfg.Type, typ)
	}
	return &Conf{Path: path, Config: *cfg}, nil
}

// readLimited reads at most one byte more than a configuration may have, so
// that ParseConfig reports an oversized file without it being read whole.
// Only a regular file is read: the open does not block (a FIFO's would,
// until a writer came), and what it opened is checked before any read.
// A link to a regular file is followed, as Kubernetes ConfigMap volumes
// are made of links.
func readLimited(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err // names the file
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return nil, err
	} else if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %w (%s)", path, ErrNotRegular, fi.Mode().Type())
	}
	data, err := io.ReadAll(io.LimitReader(f, spec.MaxConfigSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return data, nil
}

// ConfTypes lists, sorted, the resource-types that have a drop-in folder
// in confDir: every <type>.d directory whose <type> is a valid
// resource-type. Other entries are not CDI drop-in folders and are ignored
// (for instance the YAML specs of the newer container-device-interface that
// share /etc/cdi). A missing confDir is an empty list.
func ConfTypes(confDir string) ([]string, error) {
	entries, err := os.ReadDir(confDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading drop-in directory: %w", err)
	}
	var types []string
	for _, e := range entries {
		typ, ok := strings.CutSuffix(e.Name(), ".d")
		if !ok || spec.CheckResourceType(typ) != nil || !isDir(confDir, e) {
			continue
		}
		types = append(types, typ)
	}
	sort.Strings(types)
	return types, nil
}

// isDir follows a symlink, as configuration management often links folders.
func isDir(parent string, e fs.DirEntry) bool {
	if e.Type()&fs.ModeSymlink == 0 {
		return e.IsDir()
	}
	fi, err := os.Stat(filepath.Join(parent, e.Name()))
	return err == nil && fi.IsDir()
}

// LoadAll reads the drop-ins of every type ConfTypes lists, by type and then
// file name. Like LoadConfs it returns what loads along with the errors.
func LoadAll(confDir string) ([]*Conf, error) {
	types, err := ConfTypes(confDir)
	if err != nil {
		return nil, err
	}
	var all []*Conf
	var errs []error
	for _, typ := range types {
		confs, err := LoadConfs(confDir, typ)
		all = append(all, confs...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return all, errors.Join(errs...)
}
