package spec

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
)

// maxSuggestDistance is how far a misspelt argument may be from the one
// it is suggested for: one or two letters dropped, added, changed or
// swapped ("rot" for "root", "num_system_reservd", "stateDri").
const maxSuggestDistance = 2

// maxUnknownNamed bounds the unknown members an error names, so that a
// drop-in of a hundred thousand keys does not make a megabyte of details.
const maxUnknownNamed = 10

// CheckArgs refuses a configuration whose args hold a member not in
// known, with code 15 (SPEC.md, "Order of checks", step 9). The details
// name the unknown members, in document order (the first ten, and how
// many more), each with the known one it is likely a misspelling of, then
// the members known: a key ignored in silence leaves a setting at its
// default while the operator believes it set. Absent or null args hold
// nothing to refuse.
func CheckArgs(cfg *Config, known []string) error {
	args := gjson.ParseBytes(cfg.Args)
	if !args.IsObject() {
		return nil // absent or null: ParseConfig refuses any other kind
	}
	var unknown []string
	seen := map[string]bool{}
	args.ForEach(func(k, _ gjson.Result) bool {
		if name := k.String(); !slices.Contains(known, name) && !seen[name] {
			seen[name] = true
			unknown = append(unknown, name)
		}
		return true
	})
	if len(unknown) == 0 {
		return nil
	}
	var parts []string
	for _, name := range unknown[:min(len(unknown), maxUnknownNamed)] {
		part := strconv.Quote(name)
		if s := suggest(name, known); s != "" {
			part += fmt.Sprintf(" (did you mean %q?)", s)
		}
		parts = append(parts, part)
	}
	if more := len(unknown) - maxUnknownNamed; more > 0 {
		parts = append(parts, fmt.Sprintf("and %d more", more))
	}
	return NewError(CodeUnknownArg, "args: unknown argument(s) %s; known: %s", strings.Join(parts, ", "), listKnown(known))
}

func listKnown(known []string) string {
	if len(known) == 0 {
		return "none"
	}
	return strings.Join(slices.Sorted(slices.Values(known)), ", ")
}

// suggest returns the known name closest to name, within
// maxSuggestDistance and nearer than name is long (so that "x" suggests
// nothing), the first in sorted order among equals; "" when none is.
func suggest(name string, known []string) string {
	best, bestDist := "", maxSuggestDistance+1
	for _, k := range slices.Sorted(slices.Values(known)) {
		if d := distance(name, k, bestDist); d < bestDist && d < len([]rune(name)) {
			best, bestDist = k, d
		}
	}
	return best
}

// distance is the optimal string alignment distance between a and b,
// counted in runes: the edits (insert, delete, change one rune, or swap
// two neighbours) that turn a into b, no substring edited twice. Where
// it is at least limit, it returns limit, early when the lengths alone
// tell, so that a long key costs nothing.
func distance(a, b string, limit int) int {
	s, t := []rune(a), []rune(b)
	if abs(len(s)-len(t)) >= limit {
		return limit
	}
	// rows[0..2] are rows i-2, i-1 and i of the dynamic programme.
	rows := [3][]int{make([]int, len(t)+1), make([]int, len(t)+1), make([]int, len(t)+1)}
	for j := range rows[1] {
		rows[1][j] = j
	}
	for i := 1; i <= len(s); i++ {
		cur, prev, prev2 := rows[2], rows[1], rows[0]
		cur[0] = i
		for j := 1; j <= len(t); j++ {
			cost := 1
			if s[i-1] == t[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && s[i-1] == t[j-2] && s[i-2] == t[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		rows[0], rows[1], rows[2] = prev, cur, prev2
	}
	return min(rows[1][len(t)], limit)
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
