package cdispec

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"tags.cncf.io/container-device-interface/pkg/cdi"
	specs "tags.cncf.io/container-device-interface/specs-go"
)

// writeSpec replaces the spec file name with s through the CDI library's
// writer, which checks the spec and renames a temporary file into place,
// but leaves that file behind when its write fails (a full disk: 41 of
// them after one device flapped 20 times). So the library writes into a
// staging directory of this write's own, inside the spec directory (the
// same file system, for the rename), from which the file is renamed into
// place, and the staging directory goes with whatever it holds. Runtimes
// read no subdirectory of a spec directory.
func (d *Dir) writeSpec(s *specs.Spec, name string) error {
	staging, err := os.MkdirTemp(d.path, d.stagingPrefix()+"*")
	if err != nil {
		return fmt.Errorf("writing CDI spec %s: %w", name, err)
	}
	defer os.RemoveAll(staging)
	// The cache is only the library's validating writer here: no watch.
	cache, err := cdi.NewCache(cdi.WithSpecDirs(staging), cdi.WithAutoRefresh(false))
	if err != nil {
		return fmt.Errorf("writing CDI spec %s: %w", name, err)
	}
	if err := cache.WriteSpec(s, name); err != nil {
		return fmt.Errorf("writing CDI spec %s: %w", name, withoutTempName(err))
	}
	if err := os.Rename(filepath.Join(staging, name), filepath.Join(d.path, name)); err != nil {
		return fmt.Errorf("writing CDI spec %s: %w", name, withoutTempName(err))
	}
	return nil
}

// stagingPrefix starts the name of every staging directory of d's writes:
// a dot-file, and the vendor between characters no vendor name holds, so
// that the directories of another vendor's bridge sharing the spec
// directory are never taken for d's.
func (d *Dir) stagingPrefix() string { return "." + FilePrefix + "staging=" + d.vendor + "=" }

// debrisAge is how long a staging directory is left untouched before it
// is taken for a killed write's: a write takes milliseconds, and one
// under way may be another process's (the other pod of a rolling
// update), whose write would fail if its staging directory went.
const debrisAge = time.Minute

// RemoveDebris removes the staging directories of d's vendor that a
// process killed while writing left behind: those untouched for
// debrisAge. Open and Sync call it.
func (d *Dir) RemoveDebris() error {
	entries, err := os.ReadDir(d.path)
	if err != nil {
		return fmt.Errorf("CDI spec directory: %w", err)
	}
	return d.removeDebris(entries)
}

// removeDebris is RemoveDebris over entries, the directory's.
func (d *Dir) removeDebris(entries []fs.DirEntry) error {
	var errs []error
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), d.stagingPrefix()) && untouched(e, debrisAge) {
			errs = append(errs, os.RemoveAll(filepath.Join(d.path, e.Name())))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("CDI spec directory: removing what an earlier write left: %w", err)
	}
	return nil
}

// untouched says whether e was last modified age ago or earlier; one
// gone meanwhile (its write done) is not.
func untouched(e fs.DirEntry, age time.Duration) bool {
	info, err := e.Info()
	return err == nil && time.Since(info.ModTime()) >= age
}

// withoutTempName is err without the random name of the staging directory
// or of the library's temporary file: the same failure then reads the
// same at every discovery, and is logged once (bridge/internal/logrepeat).
func withoutTempName(err error) error {
	var pathErr *fs.PathError
	if errors.As(err, &pathErr) {
		return fmt.Errorf("%s of a temporary file: %w", pathErr.Op, pathErr.Err)
	}
	var linkErr *os.LinkError
	if errors.As(err, &linkErr) {
		return fmt.Errorf("%s of a temporary file: %w", linkErr.Op, linkErr.Err)
	}
	return err
}
