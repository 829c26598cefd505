package plainjson

// scanValue checks the JSON value that starts at s[i], nested depth deep
// in the document, and returns where it ends: the one place a document is
// checked, so that Value's walks need not check again.
func scanValue(s string, i, depth int) (int, error) {
	if i == len(s) {
		return 0, errNotJSON
	}
	switch c := s[i]; {
	case c == '{' || c == '[':
		if depth == MaxDepth {
			return 0, tooDeep{}
		}
		return scanComposite(s, i, depth+1)
	case c == '"':
		return scanString(s, i)
	case c == '-' || c >= '0' && c <= '9':
		return scanNumber(s, i)
	}
	for _, lit := range [...]string{"true", "false", "null"} {
		if len(s)-i >= len(lit) && s[i:i+len(lit)] == lit {
			return i + len(lit), nil
		}
	}
	return 0, errNotJSON
}

// scanComposite checks the object or array that starts at s[i].
func scanComposite(s string, i, depth int) (int, error) {
	closing := byte(']')
	if s[i] == '{' {
		closing = '}'
	}
	i = skipSpace(s, i+1)
	if i < len(s) && s[i] == closing {
		return i + 1, nil
	}
	for {
		var err error
		if closing == '}' {
			if i, err = scanKey(s, i); err != nil {
				return 0, err
			}
		}
		if i, err = scanValue(s, i, depth); err != nil {
			return 0, err
		}
		switch i = skipSpace(s, i); {
		case i < len(s) && s[i] == ',':
			i = skipSpace(s, i+1)
		case i < len(s) && s[i] == closing:
			return i + 1, nil
		default:
			return 0, errNotJSON
		}
	}
}

// scanKey checks a member's name and colon at s[i] and returns where its
// value starts.
func scanKey(s string, i int) (int, error) {
	if i == len(s) || s[i] != '"' {
		return 0, errNotJSON
	}
	i, err := scanString(s, i)
	if err != nil {
		return 0, err
	}
	if i = skipSpace(s, i); i == len(s) || s[i] != ':' {
		return 0, errNotJSON
	}
	return skipSpace(s, i+1), nil
}

// scanString checks the string that starts at s[i]: no control
// characters, and only JSON's escapes.
func scanString(s string, i int) (int, error) {
	for i++; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			return i + 1, nil
		case c < ' ':
			return 0, errNotJSON
		case c == '\\':
			if i++; i == len(s) {
				return 0, errNotJSON
			}
			switch s[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(s)-i <= 4 || hexValue(s[i+1])|hexValue(s[i+2])|hexValue(s[i+3])|hexValue(s[i+4]) > 0xf {
					return 0, errNotJSON
				}
				i += 4
			default:
				return 0, errNotJSON
			}
		}
	}
	return 0, errNotJSON
}

// scanNumber checks the number that starts at s[i]:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func scanNumber(s string, i int) (int, error) {
	if s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		i = skipDigits(s, i)
	default:
		return 0, errNotJSON
	}
	if i < len(s) && s[i] == '.' {
		if i++; i == len(s) || s[i] < '0' || s[i] > '9' {
			return 0, errNotJSON
		}
		i = skipDigits(s, i)
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		if i++; i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if i == len(s) || s[i] < '0' || s[i] > '9' {
			return 0, errNotJSON
		}
		i = skipDigits(s, i)
	}
	return i, nil
}

func skipDigits(s string, i int) int {
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}
