package spec

import (
	"fmt"
	"strconv"
	"strings"
)

// Limits from the ABNF in SPEC.md.
const (
	maxTypeLen      = 16  // resource-type = ALPHA *15alnum
	maxSubtypeLen   = 15  // resource-subtype = 1*15alnum
	maxRequestIDLen = 64  // request-id = alnum *63alnum-hyp
	maxDeviceIDLen  = 128 // device-id = alnum *127(alnum / "-" / "." / ":" / "_")
	maxAmountDigits = 9   // amount = nonzero-digit *8DIGIT
)

// ResourceSpec is a resource-type with an optional resource-subtype, written
// "type" or "type-subtype" (e.g. "gpu", "gpu-memory").
type ResourceSpec struct {
	Type    string
	Subtype string
}

// String writes the spec in its wire form.
func (r ResourceSpec) String() string {
	if r.Subtype == "" {
		return r.Type
	}
	return r.Type + "-" + r.Subtype
}

// ParseResourceSpec parses a resource-spec.
func ParseResourceSpec(s string) (ResourceSpec, error) {
	typ, sub, hasSub := strings.Cut(s, "-")
	if err := CheckResourceType(typ); err != nil {
		return ResourceSpec{}, fmt.Errorf("resource-spec %q: %w", s, err)
	}
	if hasSub && !isAlnumString(sub, 1, maxSubtypeLen) {
		return ResourceSpec{}, fmt.Errorf("%w: resource-spec %q: subtype must be 1-%d letters or digits", ErrMalformed, s, maxSubtypeLen)
	}
	return ResourceSpec{Type: typ, Subtype: sub}, nil
}

// CheckResourceType reports whether s is a valid resource-type: a letter
// followed by up to 15 letters or digits.
func CheckResourceType(s string) error {
	if s == "" || !isAlpha(s[0]) || !isAlnumString(s, 1, maxTypeLen) {
		return fmt.Errorf("%w: resource-type %q must be a letter followed by up to %d letters or digits", ErrMalformed, s, maxTypeLen-1)
	}
	return nil
}

// RequestItem is one "<resource-spec>:<amount>" element of CDI_REQUEST.
type RequestItem struct {
	Spec   ResourceSpec
	Amount int
}

// Request is a parsed CDI_REQUEST, in the order the caller wrote it.
type Request []RequestItem

// String writes the request in its wire form.
func (r Request) String() string {
	parts := make([]string, len(r))
	for i, it := range r {
		parts[i] = it.Spec.String() + ":" + strconv.Itoa(it.Amount)
	}
	return strings.Join(parts, ",")
}

// ParseRequest parses CDI_REQUEST: a comma-separated list of
// "<resource-spec>:<amount>" with positive integer amounts, each
// resource-spec at most once. The resource-specs of every item are checked
// before any amount (see RequestSpecs).
func ParseRequest(s string) (Request, error) {
	specs, amounts, err := splitRequest(s)
	if err != nil {
		return nil, err
	}
	req := make(Request, len(specs))
	seen := map[ResourceSpec]bool{}
	for i, rs := range specs {
		amount, err := parseAmount(amounts[i])
		if err != nil {
			return nil, fmt.Errorf("resource-spec %q: %w", rs, err)
		}
		if seen[rs] {
			return nil, fmt.Errorf("%w: resource-spec %q is listed more than once", ErrMalformed, rs)
		}
		seen[rs] = true
		req[i] = RequestItem{Spec: rs, Amount: amount}
	}
	return req, nil
}

// RequestSpecs returns the resource-specs CDI_REQUEST names, in request
// order, without looking at the amounts: it fails only when the request is
// not a list of "<resource-spec>:<anything>" items. A plugin uses it to
// report a resource-spec it does not serve (code 4) before a malformed
// amount (code 7), as the CDI draft's third ADD example,
// "gpu:1,gpu-memory:2048Mi", requires.
func RequestSpecs(s string) ([]ResourceSpec, error) {
	specs, _, err := splitRequest(s)
	return specs, err
}

// splitRequest splits CDI_REQUEST into its parsed resource-specs and the
// unparsed text of their amounts.
func splitRequest(s string) ([]ResourceSpec, []string, error) {
	if s == "" {
		return nil, nil, fmt.Errorf("%w: empty request", ErrMalformed)
	}
	elems := strings.Split(s, ",")
	specs := make([]ResourceSpec, len(elems))
	amounts := make([]string, len(elems))
	for i, elem := range elems {
		specText, amountText, ok := strings.Cut(elem, ":")
		if !ok {
			return nil, nil, fmt.Errorf("%w: %q is not <resource-spec>:<amount>", ErrMalformed, elem)
		}
		rs, err := ParseResourceSpec(specText)
		if err != nil {
			return nil, nil, err
		}
		specs[i], amounts[i] = rs, amountText
	}
	return specs, amounts, nil
}

func parseAmount(s string) (int, error) {
	if s == "" || len(s) > maxAmountDigits || s[0] == '0' || !isDigits(s) {
		return 0, fmt.Errorf("%w: amount %q is not a positive integer of at most %d digits without leading zeros", ErrMalformed, s, maxAmountDigits)
	}
	return strconv.Atoi(s)
}

// CheckRequestID reports whether s is a valid request-id: a letter or digit
// followed by up to 63 letters, digits or hyphens.
func CheckRequestID(s string) error {
	if s == "" || !isAlnum(s[0]) || len(s) > maxRequestIDLen || !allOf(s, isAlnumHyphen) {
		return fmt.Errorf("%w: request-id %q must be a letter or digit followed by up to %d letters, digits or hyphens", ErrMalformed, s, maxRequestIDLen-1)
	}
	return nil
}

// ParseRequestIDs parses a comma-separated list of request-ids, as in
// CDI_VALID_REQUEST_IDS. The empty string is the empty list.
func ParseRequestIDs(s string) ([]string, error) {
	if s == "" {
		return []string{}, nil
	}
	ids := strings.Split(s, ",")
	for _, id := range ids {
		if err := CheckRequestID(id); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// CheckDeviceID reports whether s is a valid device-id: a letter or digit
// followed by up to 127 letters, digits, '-', '.', ':' or '_'.
func CheckDeviceID(s string) error {
	if s == "" || !isAlnum(s[0]) || len(s) > maxDeviceIDLen || !allOf(s, isDeviceIDChar) {
		return fmt.Errorf("%w: device-id %q must be a letter or digit followed by up to %d of letters, digits, '-', '.', ':', '_'", ErrMalformed, s, maxDeviceIDLen-1)
	}
	return nil
}

// ParseDeviceIDs parses CDI_REQUEST_DEVICES: a non-empty comma-separated
// list of distinct device-ids.
func ParseDeviceIDs(s string) ([]string, error) {
	if s == "" {
		return nil, fmt.Errorf("%w: empty device list", ErrMalformed)
	}
	ids := strings.Split(s, ",")
	seen := map[string]bool{}
	for _, id := range ids {
		if err := CheckDeviceID(id); err != nil {
			return nil, err
		}
		if seen[id] {
			return nil, fmt.Errorf("%w: device-id %q is listed more than once", ErrMalformed, id)
		}
		seen[id] = true
	}
	return ids, nil
}

// ParseNUMANodes parses CDI_REQUEST_NUMA_LOCALITY: a non-empty
// comma-separated list of non-negative integers below 10000. A node listed
// again is dropped, the first place kept: the list is a preference, and
// repeats only grew what an allocation records (60,000 of them recorded
// 663 KB), so it holds at most 10000 nodes.
func ParseNUMANodes(s string) ([]int, error) {
	if s == "" {
		return nil, fmt.Errorf("%w: empty NUMA node list", ErrMalformed)
	}
	var nodes []int
	seen := map[int]bool{}
	for _, p := range strings.Split(s, ",") {
		if p == "" || len(p) > 4 || !isDigits(p) || (len(p) > 1 && p[0] == '0') {
			return nil, fmt.Errorf("%w: NUMA node %q is not a non-negative integer below 10000", ErrMalformed, p)
		}
		n, _ := strconv.Atoi(p)
		if !seen[n] {
			seen[n] = true
			nodes = append(nodes, n)
		}
	}
	return nodes, nil
}

func isAlpha(c byte) bool        { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isDigit(c byte) bool        { return c >= '0' && c <= '9' }
func isAlnum(c byte) bool        { return isAlpha(c) || isDigit(c) }
func isAlnumHyphen(c byte) bool  { return isAlnum(c) || c == '-' }
func isDeviceIDChar(c byte) bool { return isAlnumHyphen(c) || c == '.' || c == ':' || c == '_' }
func isDigits(s string) bool     { return allOf(s, isDigit) }

func isAlnumString(s string, minLen, maxLen int) bool {
	return len(s) >= minLen && len(s) <= maxLen && allOf(s, isAlnum)
}

func allOf(s string, ok func(byte) bool) bool {
	for i := 0; i < len(s); i++ {
		if !ok(s[i]) {
			return false
		}
	}
	return true
}
