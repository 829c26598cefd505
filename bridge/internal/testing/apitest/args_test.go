package apitest

import (
	"slices"
	"testing"
)

func TestWithArgs(t *testing.T) {
	argv := []string{"kube-apiserver", "--authorization-mode=RBAC", "--secure-port=6443"}
	tests := []struct {
		name  string
		extra []string
		want  []string
	}{
		{"none", nil, argv},
		{"replaces a flag Start sets", []string{"--authorization-mode=Node,RBAC"},
			[]string{"kube-apiserver", "--authorization-mode=Node,RBAC", "--secure-port=6443"}},
		{"appends a new flag", []string{"--enable-admission-plugins=NodeRestriction"},
			append(slices.Clone(argv), "--enable-admission-plugins=NodeRestriction")},
		{"a prefix is not the flag", []string{"--authorization=x"},
			append(slices.Clone(argv), "--authorization=x")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := slices.Clone(argv)
			if got := withArgs(argv, tt.extra); !slices.Equal(got, tt.want) {
				t.Errorf("withArgs(%q) = %q, want %q", tt.extra, got, tt.want)
			}
			if !slices.Equal(argv, before) {
				t.Errorf("withArgs changed its argv to %q", argv)
			}
		})
	}
}
