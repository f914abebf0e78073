// Package readmetext reads sections of the project's README.md, for tests
// that hold the README and the code to the same values.
package readmetext

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Section returns the lines of README.md from the line that is exactly
// heading (included) up to the next heading of the same or a higher
// level. It fails t when the README has no such heading.
func Section(t testing.TB, heading string) []string {
	t.Helper()
	_, here, _, _ := runtime.Caller(0)
	data, err := os.ReadFile(filepath.Join(filepath.Dir(here), "..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	level := strings.Index(heading, " ")
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		if len(out) > 0 && strings.HasPrefix(line, "#") {
			if l := strings.Index(line, " "); l > 0 && l <= level && strings.Trim(line[:l], "#") == "" {
				break
			}
		}
		if line == heading || len(out) > 0 {
			out = append(out, line)
		}
	}
	if len(out) == 0 {
		t.Fatalf("README.md has no %q", heading)
	}
	return out
}

// Tables returns the rows of the tables in the section Section returns,
// header rows included and separator rows left out, each row as its
// trimmed cells; an escaped \| is part of a cell.
func Tables(t testing.TB, heading string) [][]string {
	t.Helper()
	var rows [][]string
	for _, line := range Section(t, heading)[1:] {
		if !strings.HasPrefix(line, "|") || strings.HasPrefix(line, "|---") {
			continue
		}
		line = strings.ReplaceAll(line, `\|`, "\x00")
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i, c := range cells {
			cells[i] = strings.TrimSpace(strings.ReplaceAll(c, "\x00", "|"))
		}
		rows = append(rows, cells)
	}
	return rows
}
