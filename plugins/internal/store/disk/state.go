package disk

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
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
	if errors.Is(err, errTooLarge) || errors.Is(err, errNotRegular) {
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
// symbolic link, with errNotRegular where it is no regular file (a FIFO
// there would block the read for good), and with errTooLarge past
// MaxStateSize.
//
// It reads with plain system calls into a buffer sized by fstat: an
// os.File, from os.OpenFile or from os.NewFile on this non-blocking
// descriptor, would bring the runtime's poller up for a regular file
// (see lock).
func readNoFollow(path string) ([]byte, error) {
	// O_NONBLOCK: opening a FIFO for reading would wait for a writer. It
	// changes nothing for a regular file.
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return nil, errNotRegular
	}
	if st.Size > MaxStateSize {
		return nil, errTooLarge
	}
	// Room past the size to see the end of the file in the same read.
	buf := make([]byte, 0, st.Size+512)
	for {
		if len(buf) == cap(buf) {
			if len(buf) > MaxStateSize {
				return nil, errTooLarge
			}
			buf = slices.Grow(buf, len(buf))
		}
		// No EINTR to retry: a regular file's read is not interrupted,
		// and the runtime's signals restart system calls.
		n, err := syscall.Read(fd, buf[len(buf):cap(buf)])
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			break
		}
		buf = buf[:len(buf)+n]
	}
	if len(buf) > MaxStateSize {
		return nil, errTooLarge
	}
	return buf, nil
}

// errNotRegular is readNoFollow's error for a state path that holds no
// regular file.
var errNotRegular = errors.New("not a regular file")
