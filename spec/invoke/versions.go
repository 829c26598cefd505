package invoke

import (
	"os"
	"slices"
	"sync"
	"syscall"

	"github.com/cdiexec/cdi/spec"
)

// VersionCache keeps the VERSION reply of each plugin binary for every
// Plugin that runs it, so that a caller which makes a Plugin afresh for
// each use (the bridge, at each discovery) runs VERSION once per binary
// rather than before every call. A reply is used only while the file at
// the binary's path is the one that gave it: a plugin installed anew on
// the host (a copy renamed into place, a rewrite) has another device,
// inode, size or modification time, and is asked again.
//
// The zero value is ready to use; it is safe for concurrent use.
type VersionCache struct {
	mu      sync.Mutex
	replies map[string]cachedReply // by binary path
}

// cachedReply is a VERSION reply and the binary that gave it.
type cachedReply struct {
	binary binaryID
	reply  spec.VersionResult
}

// binaryID tells one file at a path from another.
type binaryID struct {
	dev, ino uint64
	size     int64
	mtime    int64 // nanoseconds since the epoch
}

// identify returns the identity of the file at path, following links, so
// that a link turned to another binary is another binary.
func identify(path string) (binaryID, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return binaryID{}, err
	}
	id := binaryID{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.dev, id.ino = uint64(st.Dev), st.Ino
	}
	return id, nil
}

// get returns the reply of the binary at path if it is still binary.
func (c *VersionCache) get(path string, binary binaryID) (spec.VersionResult, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.replies[path]
	if !ok || r.binary != binary {
		return spec.VersionResult{}, false
	}
	r.reply.SupportedVersions = slices.Clone(r.reply.SupportedVersions)
	return r.reply, true
}

// put keeps the reply that binary, at path, gave.
func (c *VersionCache) put(path string, binary binaryID, reply spec.VersionResult) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.replies == nil {
		c.replies = map[string]cachedReply{}
	}
	c.replies[path] = cachedReply{binary: binary, reply: reply}
}

// forget drops the reply of the binary at path.
func (c *VersionCache) forget(path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.replies, path)
}
