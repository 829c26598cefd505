// Package local is the Instance store of a single node: every Instance in
// one JSON file, changed only under an exclusive file lock and written by
// temp file, fsync and rename, so a crash leaves the old or the new file.
// Several bridge processes on one machine may share the file (each as its
// own node): the lock serializes their claims, and each notices the
// others' writes by polling the file.
package local
