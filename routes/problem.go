package routes

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Problem is one mistake found in a configuration file, with the position
// of the YAML node it concerns (1-based line and column).
type Problem struct {
	File    string
	Line    int
	Col     int
	Path    string // the field, like "routes[1].limits[0].window"; empty for syntax errors
	Message string
}

// String formats p as "FILE:LINE:COL: path: message", on one line: a
// control character, which a quoted YAML key or a file name may hold, is
// written as its Go escape (\n, \t, \x1b), so that each problem stays one
// line for the scripts that read them.
func (p Problem) String() string {
	var s string
	if p.Path == "" {
		s = fmt.Sprintf("%s:%d:%d: %s", p.File, p.Line, p.Col, p.Message)
	} else {
		s = fmt.Sprintf("%s:%d:%d: %s: %s", p.File, p.Line, p.Col, p.Path, p.Message)
	}
	if strings.IndexFunc(s, isControl) < 0 {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if isControl(r) {
			q := strconv.QuoteRune(r) // '\n', '\x1b', '\u0085'
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func isControl(r rune) bool {
	return r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0 || r == 0x2028 || r == 0x2029
}

// Problems is every mistake found in a configuration, sorted by line then
// column. It is the error Load and Parse return for an invalid file; use
// errors.As to get at the individual problems.
type Problems []Problem

// Error returns one problem per line.
func (ps Problems) Error() string {
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(p.String())
	}
	return b.String()
}

func (ps Problems) sort() {
	slices.SortStableFunc(ps, func(a, b Problem) int {
		if c := cmp.Compare(a.Line, b.Line); c != 0 {
			return c
		}
		return cmp.Compare(a.Col, b.Col)
	})
}
