// Package logtest keeps a log for a test to read: a Buffer that the
// goroutines of what the test runs may write to while the test reads it,
// and after the test ended, unlike t.Log.
package logtest

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
)

// Buffer is a log's text. Its methods are safe for concurrent use.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String is the text so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Count is how many times s occurs in the text so far.
func (b *Buffer) Count(s string) int { return strings.Count(b.String(), s) }

// Logger is a text log into b, of every level.
func (b *Buffer) Logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
