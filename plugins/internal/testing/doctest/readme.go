package doctest

import (
	"strings"
)

// ShellBlock is a fenced block of a Markdown document marked sh.
type ShellBlock struct {
	Line int    // the line of its opening fence, from 1
	Body string // its lines, each ending in a newline
}

// ShellBlocks returns the blocks of text fenced as ```sh, in order.
func ShellBlocks(text string) []ShellBlock {
	var blocks []ShellBlock
	var cur *ShellBlock
	for i, line := range strings.Split(text, "\n") {
		switch {
		case cur == nil && strings.TrimSpace(line) == "```sh":
			cur = &ShellBlock{Line: i + 1}
		case cur != nil && strings.TrimSpace(line) == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.Body += line + "\n"
		}
	}
	return blocks
}

// Commands splits a shell text into its simple commands as a reader's
// shell would run them, each a list of words: a line continued with a
// backslash is joined to the next, a word starting with # starts a
// comment, quotes are taken off their words ($(...) and variables are
// left as they are written), and |, &&, ;, & and a line's end end a
// command. < and its file are words of their own when written apart.
// It is a reader of documentation, not a shell: no expansion, no
// here-documents.
func Commands(text string) [][]string {
	var cmds [][]string
	var words []string
	end := func() {
		if len(words) > 0 {
			cmds = append(cmds, words)
		}
		words = nil
	}
	s := strings.ReplaceAll(text, "\\\n", " ")
	for i := 0; i < len(s); {
		switch c := s[i]; {
		case c == '\n' || c == ';':
			end()
			i++
		case c == '|' || c == '&':
			end()
			for i < len(s) && (s[i] == '|' || s[i] == '&') {
				i++
			}
		case c == ' ' || c == '\t':
			i++
		case c == '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		default:
			w, n := shellWord(s[i:])
			words = append(words, w)
			i += n
		}
	}
	end()
	return cmds
}

// shellWord reads the word s starts with, up to a blank or an operator
// outside quotes and $(...), and returns it unquoted and the bytes read.
func shellWord(s string) (string, int) {
	var b strings.Builder
	depth := 0 // of $( ... )
	i := 0
	for i < len(s) {
		c := s[i]
		switch {
		case depth == 0 && strings.IndexByte(" \t\n;|&", c) >= 0:
			return b.String(), i
		case c == '\'' || c == '"':
			j := strings.IndexByte(s[i+1:], c)
			if j < 0 {
				j = len(s) - i - 1
			}
			b.WriteString(s[i+1 : i+1+j])
			i += j + 2
			continue
		case c == '$' && i+1 < len(s) && s[i+1] == '(':
			depth++
			b.WriteString("$(")
			i += 2
			continue
		case c == ')' && depth > 0:
			depth--
		}
		b.WriteByte(c)
		i++
	}
	return b.String(), min(i, len(s))
}
