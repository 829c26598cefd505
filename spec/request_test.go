package spec

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseRequest(t *testing.T) {
	tests := []struct {
		in   string
		want string // canonical form; "" means an error is expected
	}{
		{"tty:3", "tty:3"},
		{"gpu:1,gpu-memory:2048", "gpu:1,gpu-memory:2048"},
		{"A:1", "A:1"},
		{"a123456789abcdef:1", "a123456789abcdef:1"},       // 16-character type
		{"gpu-abcdefghijklmno:1", "gpu-abcdefghijklmno:1"}, // 15-character subtype
		{"gpu:999999999", "gpu:999999999"},
		{"", ""},
		{"gpu", ""},
		{"gpu:", ""},
		{"gpu:0", ""},
		{"gpu:-1", ""},
		{"gpu:01", ""},
		{"gpu:+1", ""},
		{"gpu:1000000000", ""},
		{"gpu:2048Mi", ""},
		{"gpu:1,gpu-memory:2048Mi", ""},
		{"gpu:1,", ""},
		{",gpu:1", ""},
		{"gpu:1,gpu:2", ""},
		{"1gpu:1", ""},
		{"gpu-:1", ""},
		{"gpu-a-b:1", ""},
		{"gpu_x:1", ""},
		{"a123456789abcdefg:1", ""},
		{"gpu-abcdefghijklmnop:1", ""},
		{"gpu :1", ""},
		{"gpü:1", ""},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseRequest(tt.in)
			if tt.want == "" {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("ParseRequest(%q) = %v, %v; want an ErrMalformed error", tt.in, got, err)
				}
				return
			}
			if err != nil || got.String() != tt.want {
				t.Fatalf("ParseRequest(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestRequestSpecs(t *testing.T) {
	tests := []struct {
		in   string
		want []ResourceSpec // nil: an error is expected
	}{
		{"gpu:1,gpu-memory:2048Mi", []ResourceSpec{{Type: "gpu"}, {Type: "gpu", Subtype: "memory"}}},
		{"gpu:2048Mi", []ResourceSpec{{Type: "gpu"}}},
		{"tty:0", []ResourceSpec{{Type: "tty"}}},
		{"gpu:,gpu:x", []ResourceSpec{{Type: "gpu"}, {Type: "gpu"}}}, // duplicates are ParseRequest's to refuse
		{"", nil},
		{"gpu", nil},
		{"gpu:1,1gpu:1", nil},
		{"gpu-memory_x:1", nil},
		{"gpu:1,", nil},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := RequestSpecs(tt.in)
			if tt.want == nil {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("RequestSpecs(%q) = %v, %v; want an ErrMalformed error", tt.in, got, err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("RequestSpecs(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestCheckRequestID(t *testing.T) {
	long := strings.Repeat("a", 64)
	tests := map[string]bool{
		"1234": true, "a": true, "pod-1-ctr": true, long: true, "0-": true,
		"": false, "-a": false, long + "a": false, "a_b": false, "a.b": false, "a b": false, "a,b": false,
	}
	for in, ok := range tests {
		t.Run(in, func(t *testing.T) {
			err := CheckRequestID(in)
			if (err == nil) != ok {
				t.Fatalf("CheckRequestID(%q) = %v, want ok=%v", in, err, ok)
			}
		})
	}
}

func TestParseDeviceIDs(t *testing.T) {
	tests := []struct {
		in  string
		n   int
		bad bool
	}{
		{"0000:03:00.0", 1, false},
		{"tty13,tty14", 2, false},
		{"serial-ttyUSB0,cam_1", 2, false},
		{"", 0, true},
		{"a,,b", 0, true},
		{"a,a", 0, true},
		{":a", 0, true},
		{"a/b", 0, true},
		{strings.Repeat("x", 129), 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseDeviceIDs(tt.in)
			if tt.bad != (err != nil) || len(got) != tt.n {
				t.Fatalf("ParseDeviceIDs(%q) = %v, %v", tt.in, got, err)
			}
		})
	}
}

// 60,000 repeats of one node, which made one ADD record 663 KB, are one
// node.
func TestParseNUMANodesBounded(t *testing.T) {
	got, err := ParseNUMANodes(strings.Repeat("0,", 60000) + "1")
	if err != nil || !reflect.DeepEqual(got, []int{0, 1}) {
		t.Errorf("ParseNUMANodes = %v, %v; want [0 1]", got, err)
	}
}

func TestParseNUMANodes(t *testing.T) {
	tests := []struct {
		in   string
		want []int
	}{
		{"0", []int{0}},
		{"0,1", []int{0, 1}},
		{"9999", []int{9999}},
		{"1,0,1,0,1", []int{1, 0}},
		{"", nil},
		{"-1", nil},
		{"01", nil},
		{"10000", nil},
		{"0,", nil},
		{"a", nil},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseNUMANodes(tt.in)
			if tt.want == nil {
				if err == nil {
					t.Fatalf("ParseNUMANodes(%q) = %v, want an error", tt.in, got)
				}
				return
			}
			if err != nil || len(got) != len(tt.want) {
				t.Fatalf("ParseNUMANodes(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("ParseNUMANodes(%q) = %v; want %v", tt.in, got, tt.want)
				}
			}
		})
	}
}

func TestParseRequestIDs(t *testing.T) {
	if ids, err := ParseRequestIDs(""); err != nil || len(ids) != 0 || ids == nil {
		t.Fatalf(`ParseRequestIDs("") = %#v, %v; want an empty non-nil list`, ids, err)
	}
	if ids, err := ParseRequestIDs("a,b-1"); err != nil || len(ids) != 2 {
		t.Fatalf("ParseRequestIDs = %v, %v", ids, err)
	}
	if _, err := ParseRequestIDs("a,,b"); !errors.Is(err, ErrMalformed) {
		t.Fatalf("ParseRequestIDs with an empty element: %v, want ErrMalformed", err)
	}
}

// FuzzParseRequest checks that whatever parses round-trips through String
// and that every rejection is an ErrMalformed.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{"tty:3", "gpu:1,gpu-memory:2048", "gpu:1,gpu-memory:2048Mi", "", "a:1,a:1", "x-y:9,z:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRequest(s)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("ParseRequest(%q): error %v does not wrap ErrMalformed", s, err)
			}
			return
		}
		if r.String() != s {
			t.Fatalf("ParseRequest(%q).String() = %q", s, r.String())
		}
		for _, it := range r {
			if it.Amount < 1 {
				t.Fatalf("ParseRequest(%q) accepted amount %d", s, it.Amount)
			}
		}
	})
}
