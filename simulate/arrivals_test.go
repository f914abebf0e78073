package simulate

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseArrivals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want []Arrival
	}{
		{"100@58s,100@61s", []Arrival{{100, 58 * time.Second}, {100, 61 * time.Second}}},
		{"1@0", []Arrival{{1, 0}}},
		{" 5@1m30s , 2@250ms ", []Arrival{{5, 90 * time.Second}, {2, 250 * time.Millisecond}}},
		{"3@2s,4@1s", []Arrival{{3, 2 * time.Second}, {4, time.Second}}}, // order kept
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseArrivals(tc.in)
			if err != nil {
				t.Fatalf("got error %v, want none", err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestParseArrivalsErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want string
	}{
		{"", "parsing arrivals: empty, want COUNT@OFFSET,... like 100@58s,100@61s"},
		{"100", `parsing arrival "100": want COUNT@OFFSET like 100@58s`},
		{"100@58s,100x61s", `parsing arrival "100x61s": want COUNT@OFFSET like 100@58s`},
		{"100@58s,,1@2s", "parsing arrival #2: empty part, want COUNT@OFFSET like 100@58s"},
		{"100@58s,", "parsing arrival #2: empty part, want COUNT@OFFSET like 100@58s"},
		{"x@1s", `parsing arrival "x@1s": count "x": must be a whole number from 1 to 1000000`},
		{"0@1s", `parsing arrival "0@1s": count "0": must be a whole number from 1 to 1000000`},
		{"-3@1s", `parsing arrival "-3@1s": count "-3": must be a whole number from 1 to 1000000`},
		{"1.5@1s", `parsing arrival "1.5@1s": count "1.5": must be a whole number from 1 to 1000000`},
		{"10@58", `parsing arrival "10@58": offset: time: missing unit in duration "58"`},
		{"10@soon", `parsing arrival "10@soon": offset: time: invalid duration "soon"`},
		{"10@-1s", `parsing arrival "10@-1s": offset -1s: must be from 0 to 876000h0m0s`},
		// Past the virtual clock's end in 2262 every algorithm would
		// decide on an overflowed time.
		{"1@2200000h", `parsing arrival "1@2200000h": offset 2200000h0m0s: must be from 0 to 876000h0m0s`},
		{"1000001@0s", `parsing arrival "1000001@0s": count "1000001": must be a whole number from 1 to 1000000`},
		{"1000000@0s,1@1s", `parsing arrival "1@1s": more than 1000000 requests in all`},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseArrivals(tc.in)
			if err == nil {
				t.Fatalf("got %v, want error %q", got, tc.want)
			}
			if err.Error() != tc.want {
				t.Errorf("got error %q, want %q", err, tc.want)
			}
		})
	}
}

func TestParseArrivalsHugeCount(t *testing.T) {
	t.Parallel()
	_, err := ParseArrivals("99999999999999999999@1s")
	if err == nil || !strings.Contains(err.Error(), "must be a whole number from 1 to 1000000") {
		t.Errorf("got error %v, want a count error", err)
	}
}
