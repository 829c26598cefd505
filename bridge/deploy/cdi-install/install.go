package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cdiexec/cdi/spec/atomicfile"
)

// recordName is the file, in the drop-in directory, listing the defaults
// installed or found there. A dot-file: the bridge and cditool ignore it.
const recordName = ".cdi-install-defaults"

const recordHeader = "# Default drop-ins cdi-install has installed here or found here, one a line.\n" +
	"# It never installs one of these again: a removed default stays removed.\n"

// tempPrefix names files being written. A dot-file, so that the bridge
// never loads a drop-in that is half written.
const tempPrefix = ".cdi-install-"

type installer struct {
	pluginsFrom, pluginsTo, dropInsFrom, dropInsTo string
	log                                            io.Writer
}

func (in *installer) run() error {
	if err := in.plugins(); err != nil {
		return fmt.Errorf("plugins: %w", err)
	}
	if err := in.dropIns(); err != nil {
		return fmt.Errorf("drop-ins: %w", err)
	}
	return nil
}

// plugins replaces every plugin binary on the host that differs from the
// image's. Binaries the host has and the image lacks are left: they may
// be the operator's own plugins.
func (in *installer) plugins() error {
	entries, err := os.ReadDir(in.pluginsFrom)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(in.pluginsTo, 0o755); err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		src, dst := filepath.Join(in.pluginsFrom, e.Name()), filepath.Join(in.pluginsTo, e.Name())
		data, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if old, err := os.ReadFile(dst); err == nil && bytes.Equal(old, data) {
			fmt.Fprintf(in.log, "unchanged %s\n", dst)
			continue
		}
		if err := replace(dst, data, 0o755); err != nil {
			return err
		}
		fmt.Fprintf(in.log, "installed %s\n", dst)
	}
	return nil
}

// dropIns installs each default drop-in the host has neither now nor had
// before, and records every one it has; then it removes the defaults of
// earlier releases that this one withdrew, where they are unchanged.
func (in *installer) dropIns() error {
	recordPath := filepath.Join(in.dropInsTo, recordName)
	record, err := readRecord(recordPath)
	if err != nil {
		return err
	}
	before := len(record)
	carried := map[string]bool{}
	err = filepath.WalkDir(in.dropInsFrom, func(src string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(in.dropInsFrom, src)
		if err != nil {
			return err
		}
		carried[filepath.ToSlash(rel)] = true
		return in.dropIn(src, filepath.ToSlash(rel), record)
	})
	if err != nil {
		return err
	}
	for _, w := range withdrawals() {
		// An image that carries it still (one built with it listed in
		// conf.d/node-defaults.list) has not withdrawn it.
		if carried[w.rel] {
			continue
		}
		if err := in.withdraw(w, record); err != nil {
			return fmt.Errorf("%s: %w", w.rel, err)
		}
	}
	// The record keeps a withdrawn default: were an older image run
	// again, it must not install it anew.
	if len(record) == before {
		return nil
	}
	return writeRecord(recordPath, record)
}

// dropIn installs the default src as rel under the host's directory
// unless a file of that name exists or existed there.
func (in *installer) dropIn(src, rel string, record map[string]bool) error {
	dst := filepath.Join(in.dropInsTo, filepath.FromSlash(rel))
	if _, err := os.Lstat(dst); err == nil {
		record[rel] = true
		fmt.Fprintf(in.log, "kept %s: the host's own\n", dst)
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if record[rel] {
		fmt.Fprintf(in.log, "not installing %s: removed from the host after it was installed\n", dst)
		return nil
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	created, err := createOnly(dst, data, 0o644)
	if err != nil {
		return err
	}
	record[rel] = true
	if created {
		fmt.Fprintf(in.log, "installed %s\n", dst)
	}
	return nil
}

// replace puts data at dst by a rename: whoever opens or execs dst gets
// the old file or the new one whole.
func replace(dst string, data []byte, mode fs.FileMode) error {
	return atomicfile.Write(dst, data, atomicfile.Options{Perm: mode, Pattern: tempPrefix + "*", NoSyncDir: true})
}

// createOnly puts data at dst whole, by a hard link, which unlike a
// rename fails when dst exists: a file the operator writes meanwhile is
// never overwritten. It reports whether it created dst.
func createOnly(dst string, data []byte, mode fs.FileMode) (bool, error) {
	tmp, err := atomicfile.CreateTemp(filepath.Dir(dst), tempPrefix+"*", data, mode)
	if err != nil {
		return false, err
	}
	defer os.Remove(tmp)
	err = os.Link(tmp, dst)
	if errors.Is(err, fs.ErrExist) {
		return false, nil
	}
	return err == nil, err
}

// readRecord reads the record; a missing one is empty.
func readRecord(path string) (map[string]bool, error) {
	record := map[string]bool{}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return record, nil
	}
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" && !strings.HasPrefix(line, "#") {
			record[line] = true
		}
	}
	return record, sc.Err()
}

func writeRecord(path string, record map[string]bool) error {
	names := make([]string, 0, len(record))
	for n := range record {
		names = append(names, n)
	}
	slices.Sort(names)
	return replace(path, []byte(recordHeader+strings.Join(names, "\n")+"\n"), 0o644)
}
