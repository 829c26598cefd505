package spec

import (
	"fmt"
	"strconv"
	"strings"
)

// Protocol versions this module implements. 0.0.1 and 0.0.2 are the draft's;
// 0.1.0 adds the inventory, pinned allocation, richer ADD results, LIST and GC;
// 0.2.0 adds INFO's skipped_devices. A result member comes with a new version,
// never in a released one: a caller built before the member reads results of
// the versions it knows by their rules, and gets the member only when it asks
// for a version that has it.
const (
	Version001 = "0.0.1"
	Version002 = "0.0.2"
	Version010 = "0.1.0"
	Version020 = "0.2.0"

	// Current is the newest version, the one a caller should ask for.
	Current = Version020
)

// SupportedVersions returns the versions this module speaks, oldest first.
// It returns a fresh slice on each call, so callers may keep or modify it.
func SupportedVersions() []string {
	return []string{Version001, Version002, Version010, Version020}
}

// IsSupported reports whether v is exactly one of SupportedVersions.
func IsSupported(v string) bool {
	for _, s := range SupportedVersions() {
		if v == s {
			return true
		}
	}
	return false
}

// AtLeast reports whether version v is the same as or newer than min.
// A version that does not parse is never at least anything.
func AtLeast(v, min string) bool {
	c, err := CompareVersions(v, min)
	return err == nil && c >= 0
}

// CompareVersions compares two MAJOR.MINOR.PATCH versions numerically and
// returns -1, 0 or 1.
func CompareVersions(a, b string) (int, error) {
	pa, err := parseVersion(a)
	if err != nil {
		return 0, err
	}
	pb, err := parseVersion(b)
	if err != nil {
		return 0, err
	}
	for i := range pa {
		switch {
		case pa[i] < pb[i]:
			return -1, nil
		case pa[i] > pb[i]:
			return 1, nil
		}
	}
	return 0, nil
}

func parseVersion(v string) ([3]int, error) {
	var out [3]int
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return out, fmt.Errorf("%w: version %q is not MAJOR.MINOR.PATCH", ErrMalformed, v)
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || p == "" || (len(p) > 1 && p[0] == '0') {
			return out, fmt.Errorf("%w: version %q has a bad component %q", ErrMalformed, v, p)
		}
		out[i] = n
	}
	return out, nil
}

// Newest returns the newest version that appears in both lists, or "" when
// they share none. Callers use it to pick CDI_VERSION from a plugin's
// VERSION reply.
func Newest(ours, theirs []string) string {
	best := ""
	for _, v := range theirs {
		if !contains(ours, v) {
			continue
		}
		if best == "" || AtLeast(v, best) {
			best = v
		}
	}
	return best
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
