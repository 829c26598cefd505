package store

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzDecode feeds the state reader arbitrary bytes, as a damaged or
// hand-edited state file would. It must never panic, and whatever it
// accepts must encode and read back to the same document. The seeds run
// with every go test; `go test -fuzz=FuzzDecode ./plugins/internal/store`
// explores further (DEVELOPING.md, "Fuzzing").
func FuzzDecode(f *testing.F) {
	rec := `{"request":"tty:1","created":"2026-11-23T10:00:00Z","result":{"cdiVersion":"0.1.0","devices":["/dev/tty13"],` +
		`"deviceNodes":[{"hostPath":"/dev/tty13","containerPath":"/dev/tty13","permissions":"rw"}],"env":{"A":"1"},` +
		`"units":[{"resource":"tty","device":"tty13","slot":0}]}}`
	for _, seed := range []string{
		`{"format":1,"bootID":"b","allocations":{}}`,
		`{"format":1,"bootID":"b","allocations":{"r1":` + rec + `}}`,
		`{"format":1,"bootID":"b","allocations":{"r1":` + rec + `,"r1":` + rec + `}}`,
		`{"format":1,"bootID":"b","allocations":{"r1":null}}`,
		`{"format":2,"allocations":{}}`,
		`{"format":1,"allocations":null}`,
		strings.Repeat("[", 100),
		`{"format":1e400}`,
		"",
		"\xff\xfe",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := Decode(data)
		if err != nil {
			return
		}
		enc, err := Encode(st)
		if err != nil {
			t.Fatalf("Decode accepted what Encode refuses: %v\n%s", err, data)
		}
		again, err := Decode(enc)
		if err != nil {
			t.Fatalf("Encode wrote what Decode refuses: %v\n%s", err, enc)
		}
		if enc2, _ := Encode(again); !bytes.Equal(enc, enc2) {
			t.Fatalf("a round trip changed the document:\n%s\n%s", enc, enc2)
		}
	})
}
