// Command pagefloor is the floor (testdata/floor) that also writes one
// byte to each of 256 pages of fresh heap before it prints. The
// breakdown times it beside the floor: the difference, over the
// difference in page faults, is what one fresh page costs on the machine
// at hand, which varies far more between machines than instructions do.
package main

import (
	"os"
	"syscall"
)

const freshPages = 256

func main() {
	page := os.Getpagesize()
	buf := make([]byte, freshPages*page)
	// One fault per page even where the kernel would back the heap with
	// huge pages: the price is of the pages every process maps.
	_ = syscall.Madvise(buf, syscall.MADV_NOHUGEPAGE)
	touched := 0
	for i := 0; i < len(buf); i += page {
		buf[i] = 1
		touched += int(buf[i]) // a read, so the writes cannot be dropped
	}
	if touched != freshPages {
		os.Exit(1)
	}
	os.Stdout.WriteString(`{"cdiVersion":"0.1.0"}` + "\n")
}
