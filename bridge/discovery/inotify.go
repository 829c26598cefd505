package discovery

import (
	"errors"
	"fmt"

	"github.com/fsnotify/fsnotify"
)

// Watcher tells Run that something changed in a device directory. The
// bridge's is NewInotify; tests use a fake that they drive by hand.
type Watcher interface {
	// Add watches the entries of dir (not of its subdirectories).
	// Adding a directory already watched is no error.
	Add(dir string) error
	// Remove stops watching dir.
	Remove(dir string) error
	// Events receives the path of every entry created, removed or
	// renamed in a watched directory, and of a watched directory that
	// went away itself.
	Events() <-chan string
	// Errors receives what goes wrong with the watch as a whole; an
	// error wrapping ErrOverflow means events were lost.
	Errors() <-chan error
	// Close stops every watch and closes both channels.
	Close() error
}

// ErrOverflow is wrapped by a Watcher's error when the kernel dropped
// events: any watched directory may have changed.
var ErrOverflow = errors.New("device events lost")

// inotify is a Watcher over fsnotify's inotify backend.
type inotify struct {
	w      *fsnotify.Watcher
	events chan string
	errs   chan error
	// done ends forward when nobody reads events any more.
	done chan struct{}
}

// NewInotify returns a Watcher backed by inotify. It fails when the
// kernel refuses another inotify instance (fs.inotify.max_user_instances).
func NewInotify() (Watcher, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	in := &inotify{w: w, events: make(chan string, 256), errs: make(chan error, 1), done: make(chan struct{})}
	go in.forward()
	return in, nil
}

// forward passes fsnotify's events on until it closes. A write or an
// attribute change tells nothing about which devices exist, and every
// write to /dev/null makes one: they are dropped here, before anyone
// is woken for them.
func (in *inotify) forward() {
	defer close(in.events)
	defer close(in.errs)
	events, errs := in.w.Events, in.w.Errors
	for events != nil || errs != nil {
		select {
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if ev.Op&(fsnotify.Create|fsnotify.Remove|fsnotify.Rename) == 0 {
				continue
			}
			select {
			case in.events <- ev.Name:
			case <-in.done:
				return
			}
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				err = fmt.Errorf("%w: %w", ErrOverflow, err)
			}
			select {
			case in.errs <- err:
			default: // one waiting error says enough: the answer to each is a full look
			}
		}
	}
}

func (in *inotify) Add(dir string) error    { return in.w.Add(dir) }
func (in *inotify) Remove(dir string) error { return in.w.Remove(dir) }
func (in *inotify) Events() <-chan string   { return in.events }
func (in *inotify) Errors() <-chan error    { return in.errs }

func (in *inotify) Close() error {
	close(in.done)
	return in.w.Close()
}
