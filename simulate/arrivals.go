package simulate

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Arrival is a group of Count requests that arrive together at Offset from
// the simulation's origin, one after the other in the same instant.
type Arrival struct {
	Count  int
	Offset time.Duration
}

// MaxOffset bounds the offsets of -at and the -duration of a pattern: a
// hundred years, far within the virtual clock's range (Unix nanoseconds
// in an int64 end in 2262).
const MaxOffset = 100 * 365 * 24 * time.Hour

// ParseArrivals parses a traffic pattern written as comma-separated
// COUNT@OFFSET parts, such as "100@58s,100@61s": COUNT is a whole number
// from 1 to MaxRequests (in all) and OFFSET a Go duration from 0 to
// MaxOffset.
// Spaces around parts are ignored. The parts are returned in the order
// given; Run sorts them by offset. An error names the first malformed part.
func ParseArrivals(s string) ([]Arrival, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("parsing arrivals: empty, want COUNT@OFFSET,... like 100@58s,100@61s")
	}
	parts := strings.Split(s, ",")
	out := make([]Arrival, 0, len(parts))
	total := 0
	for i, part := range parts {
		part = strings.TrimSpace(part)
		if part == "" {
			return nil, fmt.Errorf("parsing arrival #%d: empty part, want COUNT@OFFSET like 100@58s", i+1)
		}
		count, offset, ok := strings.Cut(part, "@")
		if !ok {
			return nil, fmt.Errorf("parsing arrival %q: want COUNT@OFFSET like 100@58s", part)
		}
		n, err := strconv.Atoi(strings.TrimSpace(count))
		if err != nil || n <= 0 || n > MaxRequests {
			return nil, fmt.Errorf("parsing arrival %q: count %q: must be a whole number from 1 to %d", part, count, MaxRequests)
		}
		d, err := time.ParseDuration(strings.TrimSpace(offset))
		if err != nil {
			return nil, fmt.Errorf("parsing arrival %q: offset: %w", part, err)
		}
		if d < 0 || d > MaxOffset {
			return nil, fmt.Errorf("parsing arrival %q: offset %s: must be from 0 to %s", part, d, MaxOffset)
		}
		if total += n; total > MaxRequests {
			return nil, fmt.Errorf("parsing arrival %q: more than %d requests in all", part, MaxRequests)
		}
		out = append(out, Arrival{Count: n, Offset: d})
	}
	return out, nil
}
