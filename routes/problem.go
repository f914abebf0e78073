package routes

import (
	"cmp"
	"fmt"
	"slices"
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

// String formats p as "FILE:LINE:COL: path: message".
func (p Problem) String() string {
	if p.Path == "" {
		return fmt.Sprintf("%s:%d:%d: %s", p.File, p.Line, p.Col, p.Message)
	}
	return fmt.Sprintf("%s:%d:%d: %s: %s", p.File, p.Line, p.Col, p.Path, p.Message)
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
