package plainjson

// PeekString returns the string member name of the object data holds, or
// "" when it has none, without checking the rest of data: members before
// it need only be told apart (strings closed, brackets balanced), and
// data may break off after it. It is for a document that may be broken,
// such as a plugin's stdin when it picks the version of an error
// document (SPEC.md, "Version of the output").
func PeekString(data []byte, name string) string {
	s := string(data)
	i := skipSpace(s, 0)
	if i == len(s) || s[i] != '{' {
		return ""
	}
	for i = skipSpace(s, i+1); i < len(s) && s[i] == '"'; {
		keyEnd, err := scanString(s, i)
		if err != nil {
			return ""
		}
		key := unescape(s[i+1 : keyEnd-1])
		if i = skipSpace(s, keyEnd); i == len(s) || s[i] != ':' {
			return ""
		}
		i = skipSpace(s, i+1)
		if key == name {
			return peekedString(s, i)
		}
		end, ok := roughEnd(s, i)
		if !ok {
			return ""
		}
		if i = skipSpace(s, end); i == len(s) || s[i] != ',' {
			return ""
		}
		i = skipSpace(s, i+1)
	}
	return ""
}

// peekedString is the string at s[i], or "" where there is none.
func peekedString(s string, i int) string {
	if i == len(s) || s[i] != '"' {
		return ""
	}
	end, err := scanString(s, i)
	if err != nil {
		return ""
	}
	return unescape(s[i+1 : end-1])
}

// roughEnd returns where the value at s[i] ends, telling strings and
// brackets apart but checking nothing else; false where s breaks off
// first.
func roughEnd(s string, i int) (int, bool) {
	depth := 0
	for ; i < len(s); i++ {
		switch s[i] {
		case '"':
			if i = roughStringEnd(s, i); i == len(s) {
				return 0, false
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth--; depth < 0 {
				return i, true
			}
		case ',':
			if depth == 0 {
				return i, true
			}
		}
		if depth == 0 && (s[i] == '"' || s[i] == '}' || s[i] == ']') {
			return i + 1, true
		}
	}
	return 0, false
}

// roughStringEnd returns the index of the quote that closes the string at
// s[i], or len(s).
func roughStringEnd(s string, i int) int {
	for i++; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return i
		}
	}
	return len(s)
}
