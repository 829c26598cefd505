package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
)

// withdrawal is a default drop-in that earlier releases installed and
// this one does not: what it offers, and the SHA-256 of each version an
// earlier release could have installed, to tell one left as installed
// from one the operator edited.
type withdrawal struct {
	rel    string
	offers string
	sums   []string
}

// withdrawals are the defaults no longer installed on a node. Their sums
// are those of every version of the file ever committed to conf.d, from
// `git log --format=%H -- conf.d/<rel>` and `git show <commit>:conf.d/<rel>
// | sha256sum`, while the image carried all of conf.d; TestWithdrawals
// checks them against the history.
func withdrawals() []withdrawal {
	return []withdrawal{
		{
			rel:    "tty.d/generic.conf",
			offers: "the host's virtual consoles (/dev/ttyN above num_system_reserved): a pod given one can write to the console and read what is typed on it",
			sums:   []string{"1b750c44ffe612b54625f6c22bbf1ec8ee5ecc34c4c97edc738195cd641ac277"},
		},
		{
			rel:    "camera.d/endpoint.conf",
			offers: "the network endpoints it lists on every node, healthy whether they answer or not unless args.probe.tcp is true (as shipped: two example cameras at 192.0.2.x that lead nowhere)",
			sums:   []string{"d020469205119891a862ff5d0b60178e1b69c5ab3a3a828cb1071b286c92ef83"},
		},
	}
}

// withdraw removes w from the host when cdi-install put it there (the
// record lists it) and it is still, byte for byte, a version a release
// installed; an edited one is the operator's and stays. A link or any
// other file that is not a regular one is never removed, nor followed.
func (in *installer) withdraw(w withdrawal, record map[string]bool) error {
	if !record[w.rel] {
		return nil
	}
	dst := filepath.Join(in.dropInsTo, filepath.FromSlash(w.rel))
	fi, err := os.Lstat(dst)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		fmt.Fprintf(in.log, "kept %s: no longer a default, and not a regular file here, so the operator's; it offers %s\n", dst, w.offers)
		return nil
	}
	sum, same, err := sumOf(dst, fi)
	if err != nil {
		return err
	}
	if !same {
		fmt.Fprintf(in.log, "kept %s: it changed while being checked\n", dst)
		return nil
	}
	if !slices.Contains(w.sums, sum) {
		fmt.Fprintf(in.log, "kept %s: no longer a default, but edited here, so the operator's; it offers %s\n", dst, w.offers)
		return nil
	}
	// The file hashed is still the one at dst, not a link put there since.
	if now, err := os.Lstat(dst); err != nil || !os.SameFile(fi, now) {
		fmt.Fprintf(in.log, "kept %s: it changed while being checked\n", dst)
		return nil
	}
	if err := os.Remove(dst); err != nil {
		return err
	}
	fmt.Fprintf(in.log, "removed %s: a default of an earlier release, unchanged, which this release no longer installs; it offered %s\n", dst, w.offers)
	return nil
}

// sumOf is the hex SHA-256 of the regular file at path, opened without
// following a link and without blocking on a FIFO; same is false when
// what it opened is not the file fi describes.
func sumOf(path string, fi fs.FileInfo) (sum string, same bool, err error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ELOOP) || errors.Is(err, fs.ErrNotExist) {
		return "", false, nil // a link, or gone, since fi was read
	}
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	opened, err := f.Stat()
	if err != nil || !opened.Mode().IsRegular() || !os.SameFile(fi, opened) {
		return "", false, err
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", false, err
	}
	return hex.EncodeToString(h.Sum(nil)), true, nil
}
