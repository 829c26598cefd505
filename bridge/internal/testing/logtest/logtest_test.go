package logtest

import (
	"sync"
	"testing"
)

func TestBufferTakesConcurrentWrites(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				b.Logger().Info("line")
				_ = b.Count("line")
			}
		})
	}
	wg.Wait()
	if n := b.Count("msg=line"); n != 800 {
		t.Errorf("%d lines, want 800", n)
	}
}
