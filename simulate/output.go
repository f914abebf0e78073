package simulate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
)

// tableHeader names the table's columns, in order.
var tableHeader = [...]string{"algorithm", "accepted", "rejected", "queued", "peak"}

// WriteTable writes rs as a table with a header row: the algorithm name
// left-aligned, the counts right-aligned, columns two spaces apart.
func WriteTable(w io.Writer, rs []Result) error {
	rows := make([][len(tableHeader)]string, 0, len(rs))
	widths := [len(tableHeader)]int{}
	for i, h := range tableHeader {
		widths[i] = len(h)
	}
	for _, r := range rs {
		row := [len(tableHeader)]string{r.Algorithm, strconv.Itoa(r.Accepted), strconv.Itoa(r.Rejected), strconv.Itoa(r.Queued), strconv.Itoa(r.Peak)}
		for i, c := range row {
			widths[i] = max(widths[i], len(c))
		}
		rows = append(rows, row)
	}
	var b bytes.Buffer
	line := func(row [len(tableHeader)]string) {
		fmt.Fprintf(&b, "%-*s", widths[0], row[0])
		for i := 1; i < len(row); i++ {
			fmt.Fprintf(&b, "  %*s", widths[i], row[i])
		}
		b.WriteByte('\n')
	}
	line(tableHeader)
	for _, row := range rows {
		line(row)
	}
	if _, err := w.Write(b.Bytes()); err != nil {
		return fmt.Errorf("writing table: %w", err)
	}
	return nil
}

// WriteJSON writes rs as a JSON array with one object per algorithm, each on
// its own line:
//
//	{"algorithm":"fixed_window","accepted":200,"rejected":0,"queued":0,"peak":200}
func WriteJSON(w io.Writer, rs []Result) error {
	var b bytes.Buffer
	b.WriteString("[")
	for i, r := range rs {
		obj, err := json.Marshal(r)
		if err != nil {
			return fmt.Errorf("encoding %s result: %w", r.Algorithm, err)
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("\n  ")
		b.Write(obj)
	}
	if len(rs) > 0 {
		b.WriteByte('\n')
	}
	b.WriteString("]\n")
	if _, err := w.Write(b.Bytes()); err != nil {
		return fmt.Errorf("writing json: %w", err)
	}
	return nil
}
