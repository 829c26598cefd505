package disk

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"

	"github.com/cdiexec/cdi/plugins/internal/store"
)

// load reads the state file. It returns the state and its encoding as
// loaded, against which the state after fn is compared. A missing file is
// an empty state; a link at its path is not followed but refused.
func (s *Store) load() (*store.State, []byte, error) {
	data, err := readNoFollow(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		st := store.NewState(s.bootID)
		enc, err := store.Encode(st)
		return st, enc, err
	}
	if errors.Is(err, syscall.ELOOP) {
		return nil, nil, fmt.Errorf("state file %s: %w: it is a symbolic link", s.path, store.ErrCorrupt)
	}
	if errors.Is(err, errTooLarge) {
		return nil, nil, fmt.Errorf("state file %s: %w: %w", s.path, store.ErrCorrupt, err)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read state file: %w", err)
	}
	st, err := store.Decode(data)
	if err != nil {
		return nil, nil, fmt.Errorf("state file %s: %w: %w", s.path, store.ErrCorrupt, err)
	}
	// Compare against the re-encoded state, not the bytes read, so that a
	// file a human reformatted is not rewritten when nothing changed.
	enc, err := store.Encode(st)
	if err != nil {
		return nil, nil, fmt.Errorf("state file %s: %w", s.path, err)
	}
	return st, enc, nil
}

// MaxStateSize bounds the state file a plugin reads. An allocation of one
// slot takes about 160 bytes, so this holds some 50,000 (20,000 slots is
// a node of 5,000 devices of capacity 4); such a state already costs a
// call about 0.8 s and 130 MB (55,000 allocations, 8.9 MB, measured), and
// a larger file, hand-made or damaged, would cost more on every call.
const MaxStateSize = 8 << 20

// errTooLarge is readNoFollow's error for a file over MaxStateSize: a
// type whose text is made when it is printed, not a fmt.Errorf that every
// plugin process would run, and fault fmt's machinery in for, at package
// init.
var errTooLarge error = tooLargeError{}

type tooLargeError struct{}

func (tooLargeError) Error() string { return fmt.Sprintf("larger than %d MiB", MaxStateSize>>20) }

// readNoFollow reads the file at path, failing with ELOOP where path is a
// symbolic link, and with errTooLarge past MaxStateSize.
func readNoFollow(path string) ([]byte, error) {
	// os.NewFile on a plain descriptor, not os.OpenFile, which would
	// bring the runtime's poller up for a regular file (see lock).
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxStateSize+1))
	if err == nil && len(data) > MaxStateSize {
		return nil, errTooLarge
	}
	return data, err
}
