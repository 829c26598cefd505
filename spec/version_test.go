package spec

import "testing"

func TestCompareVersions(t *testing.T) {
	tests := []struct {
		a, b string
		want int
		bad  bool
	}{
		{"0.0.1", "0.0.2", -1, false},
		{"0.1.0", "0.0.2", 1, false},
		{"0.10.0", "0.9.0", 1, false},
		{"1.0.0", "1.0.0", 0, false},
		{"0.999", "0.0.1", 0, true},
		{"0.0.01", "0.0.1", 0, true},
		{"a.b.c", "0.0.1", 0, true},
		{"", "0.0.1", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.a+"_"+tt.b, func(t *testing.T) {
			got, err := CompareVersions(tt.a, tt.b)
			if (err != nil) != tt.bad || got != tt.want {
				t.Fatalf("CompareVersions(%q, %q) = %d, %v", tt.a, tt.b, got, err)
			}
		})
	}
}

func TestNewest(t *testing.T) {
	if got := Newest(SupportedVersions(), []string{"0.0.1", "0.0.2"}); got != "0.0.2" {
		t.Errorf("Newest = %q, want 0.0.2", got)
	}
	if got := Newest(SupportedVersions(), []string{"0.0.2", "0.1.0", "9.9.9"}); got != "0.1.0" {
		t.Errorf("Newest = %q, want 0.1.0", got)
	}
	if got := Newest(SupportedVersions(), []string{"0.0.2", "0.1.0", "0.2.0"}); got != "0.2.0" {
		t.Errorf("Newest = %q, want 0.2.0", got)
	}
	if got := Newest(SupportedVersions(), []string{"0.999"}); got != "" {
		t.Errorf("Newest = %q, want none", got)
	}
}

func TestSupported(t *testing.T) {
	for _, v := range []string{"0.0.1", "0.0.2", "0.1.0", "0.2.0"} {
		if !IsSupported(v) {
			t.Errorf("IsSupported(%q) = false", v)
		}
	}
	for _, v := range []string{"", "0.999", "0.1", "0.0.3", "0.1.1", "0.3.0"} {
		if IsSupported(v) {
			t.Errorf("IsSupported(%q) = true", v)
		}
	}
	s := SupportedVersions()
	s[0] = "mutated"
	if SupportedVersions()[0] != Version001 {
		t.Error("SupportedVersions shares its backing array")
	}
}
