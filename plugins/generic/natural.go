package main

import "strings"

// naturalLess orders strings with their digit runs compared as numbers, so
// that /dev/ttyUSB2 comes before /dev/ttyUSB10, as an operator expects.
// Strings equal in that order (ttyUSB01, ttyUSB1) fall back to bytes.
func naturalLess(a, b string) bool {
	x, y := a, b
	for x != "" && y != "" {
		xd, yd := isDigit(x[0]), isDigit(y[0])
		if xd && yd {
			nx, ny := leadingDigits(x), leadingDigits(y)
			if c := compareNumbers(x[:nx], y[:ny]); c != 0 {
				return c < 0
			}
			x, y = x[nx:], y[ny:]
			continue
		}
		if x[0] != y[0] {
			return x[0] < y[0]
		}
		x, y = x[1:], y[1:]
	}
	if len(x) != len(y) {
		return len(x) < len(y)
	}
	return a < b
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func leadingDigits(s string) int {
	n := 0
	for n < len(s) && isDigit(s[n]) {
		n++
	}
	return n
}

// compareNumbers compares decimal digit strings of any length by value.
func compareNumbers(a, b string) int {
	a, b = strings.TrimLeft(a, "0"), strings.TrimLeft(b, "0")
	if len(a) != len(b) {
		if len(a) < len(b) {
			return -1
		}
		return 1
	}
	return strings.Compare(a, b)
}
