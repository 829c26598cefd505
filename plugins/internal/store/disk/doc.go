// Package disk keeps a plugin's slot state (store.State) in one JSON file,
// normally <stateDir>/<type>/<plugin>.json.
//
// Every Update holds an exclusive flock on a separate file, <path>.lock, for
// the whole read-modify-write: the data file itself cannot carry the lock,
// because every save replaces it by renaming a new file over it, and a lock
// on the old inode would not exclude a process that opened the new one.
//
// Saves are crash-safe: the new state is written to a temporary file in the
// same directory, <path>.tmp, synced, and renamed over the old one. A reader
// therefore sees the old or the new state, never a mix; a crash can leave
// only a stale temporary file, which the next Update removes. The directory
// is synced after the rename only when no boot id is known: otherwise a
// power failure that undoes the rename reboots the machine too, and the
// state that comes back is released on the next call like the lost one.
//
// Nothing is written through a link: the state directory must not be a
// link nor writable by others (ErrUnsafeDir); the lock and state files
// are opened without following a link, and the temporary file is created
// exclusively, so that a link placed at its name fails the save.
//
// A file that cannot be read back as a valid state is reported as an error
// wrapping store.ErrCorrupt and is never replaced by an empty state: that
// would silently free device slots that are still in use.
package disk
