// Command statefloor is the benchmark's second floor: the least one plugin
// call can cost while keeping its state as SPEC.md requires ("Concurrency
// and state"). It reads stdin and the boot id, takes an exclusive flock,
// reads the state file, writes the new state to a temporary file, fsyncs
// it and renames it over the old one (fsyncing the directory too where no
// boot id is known), and prints one JSON object. Its state is the boot id
// and the request-ids as lines of text: parsing and device logic are the
// plugins' own cost, not the rule's. CDI_COMMAND is ADD or DEL,
// CDI_REQUEST_ID the id, and BENCH_STATE_FILE the state file.
package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

func main() {
	if err := run(); err != nil {
		os.Stderr.WriteString("statefloor: " + err.Error() + "\n")
		os.Exit(1)
	}
	os.Stdout.WriteString(`{"cdiVersion":"0.1.0"}` + "\n")
}

func run() error {
	if _, err := io.ReadAll(os.Stdin); err != nil {
		return err
	}
	bootID, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	path := os.Getenv("BENCH_STATE_FILE")
	lock, err := os.OpenFile(path+".lock", os.O_RDONLY|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	_, ids, _ := bytes.Cut(old, []byte("\n"))
	line := []byte(os.Getenv("CDI_REQUEST_ID") + "\n")
	ids = bytes.ReplaceAll(ids, line, nil)
	if os.Getenv("CDI_COMMAND") == "ADD" {
		ids = append(ids, line...)
	}
	state := append(append(bytes.TrimSpace(bootID), '\n'), ids...)
	return save(path, state, len(bootID) == 0)
}

// save is the crash-safe write every plugin's store does.
func save(path string, data []byte, syncDir bool) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	if !syncDir {
		return nil
	}
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer dir.Close()
	return dir.Sync()
}
