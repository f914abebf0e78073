package simulate

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var specExample = []Arrival{{100, 58 * time.Second}, {100, 61 * time.Second}}

func TestWriteTable(t *testing.T) {
	t.Parallel()
	rs, err := Run(Params{Limit: 100, Window: time.Minute}, specExample)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := WriteTable(&b, rs); err != nil {
		t.Fatalf("got error %v, want none", err)
	}
	const want = `algorithm               accepted  rejected  queued  peak
token_bucket                 105        95       0   105
leaky_bucket                   2       198       0     2
fixed_window                 200         0       0   200
sliding_window_log           100       100       0   100
sliding_window_counter       102        98       0   102
`
	if got := b.String(); got != want {
		t.Errorf("got table\n%s\nwant\n%s", got, want)
	}
}

func TestWriteTableWidensColumns(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	if err := WriteTable(&b, []Result{{Algorithm: "fixed_window", Accepted: 1234567890, Rejected: 1, Peak: 7}}); err != nil {
		t.Fatalf("got error %v, want none", err)
	}
	const want = `algorithm       accepted  rejected  queued  peak
fixed_window  1234567890         1       0     7
`
	if got := b.String(); got != want {
		t.Errorf("got table\n%s\nwant\n%s", got, want)
	}
}

func TestWriteJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		rs   []Result
		want string
	}{
		{"none", nil, "[]\n"},
		{"departures are left out", []Result{
			{Algorithm: "fixed_window", Accepted: 200, Peak: 200, Departures: []time.Duration{1, 2}},
			{Algorithm: "leaky_bucket", Accepted: 3, Rejected: 4, Queued: 2, Peak: 1},
		}, `[
  {"algorithm":"fixed_window","accepted":200,"rejected":0,"queued":0,"peak":200},
  {"algorithm":"leaky_bucket","accepted":3,"rejected":4,"queued":2,"peak":1}
]
`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var b strings.Builder
			if err := WriteJSON(&b, tc.rs); err != nil {
				t.Fatalf("got error %v, want none", err)
			}
			if got := b.String(); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

// failingWriter fails every write, like a closed pipe.
type failingWriter struct{}

var errClosed = errors.New("closed")

func (failingWriter) Write([]byte) (int, error) { return 0, errClosed }

func TestWritersReportWriteErrors(t *testing.T) {
	t.Parallel()
	p := Params{Limit: 1, Window: time.Second}
	rs := []Result{{Algorithm: "fixed_window"}}
	for name, write := range map[string]func() error{
		"table": func() error { return WriteTable(failingWriter{}, rs) },
		"json":  func() error { return WriteJSON(failingWriter{}, rs) },
		"svg":   func() error { return WriteSVG(failingWriter{}, p, NewTimeline(p, &Traffic{}), rs) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if err := write(); !errors.Is(err, errClosed) {
				t.Errorf("got error %v, want one wrapping %v", err, errClosed)
			}
		})
	}
}
