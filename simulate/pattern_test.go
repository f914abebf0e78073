package simulate

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPatternSteady(t *testing.T) {
	t.Parallel()
	tr, err := Pattern{Shape: "steady", Rate: 2, Duration: 2 * time.Second, Consumers: 2}.Traffic(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ms := time.Millisecond
	want := []Request{{At: 0, Consumer: 0}, {At: 250 * ms, Consumer: 1}, {At: 500 * ms, Consumer: 0}, {At: 750 * ms, Consumer: 1}, {At: 1000 * ms, Consumer: 0}, {At: 1250 * ms, Consumer: 1}, {At: 1500 * ms, Consumer: 0}, {At: 1750 * ms, Consumer: 1}}
	if !slices.Equal(tr.Requests, want) {
		t.Errorf("got %v, want %v", tr.Requests, want)
	}
	if want := []string{"consumer-1", "consumer-2"}; !slices.Equal(tr.Keys, want) {
		t.Errorf("got keys %q, want %q", tr.Keys, want)
	}
}

// TestPatternSteadyTinyRate: a rate so low that one request every 1/Rate
// seconds overflows a float64 still sends the first consumer's request at
// 0, and nothing else, rather than one at a time that is no number (0 x
// +Inf), which every algorithm rejected.
func TestPatternSteadyTinyRate(t *testing.T) {
	t.Parallel()
	for _, rate := range []float64{1e-300, 1e-10} {
		tr, err := Pattern{Shape: "steady", Rate: rate, Duration: 10 * time.Second, Consumers: 3}.Traffic(time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if want := []Request{{At: 0, Consumer: 0}}; !slices.Equal(tr.Requests, want) {
			t.Errorf("rate %g: got %v, want %v", rate, tr.Requests, want)
		}
	}
}

func TestPatternDeterministic(t *testing.T) {
	t.Parallel()
	for _, shape := range []string{"poisson", "burst"} {
		t.Run(shape, func(t *testing.T) {
			t.Parallel()
			pt := Pattern{Shape: shape, Rate: 3, Duration: time.Minute, Consumers: 4, Seed: 9}
			a, _ := pt.Traffic(time.Second)
			b, _ := pt.Traffic(time.Second)
			pt.Seed++
			c, _ := pt.Traffic(time.Second)
			if !slices.Equal(a.Requests, b.Requests) {
				t.Error("got different traffic for one seed, want equal")
			}
			if slices.Equal(a.Requests, c.Requests) {
				t.Error("got equal traffic for two seeds, want different")
			}
			if !slices.IsSortedFunc(a.Requests, byArrival) {
				t.Error("got requests out of order")
			}
			// 3 x 60 x 4 = 720 on average.
			if n := len(a.Requests); n < 600 || n > 840 {
				t.Errorf("got %d requests, want about 720", n)
			}
			per := make([]int, 4)
			for _, r := range a.Requests {
				per[r.Consumer]++
				if r.At < 0 || r.At >= time.Minute {
					t.Fatalf("got a request at %s, want it within the minute", r.At)
				}
			}
			for c, n := range per {
				if n < 120 || n > 240 {
					t.Errorf("consumer %d: got %d requests, want about 180", c, n)
				}
			}
		})
	}
}

func TestPatternBurstsArriveTogether(t *testing.T) {
	t.Parallel()
	tr, err := Pattern{Shape: "burst", Rate: 2, Duration: 30 * time.Second, Consumers: 1, Seed: 1}.Traffic(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// One burst of 2 x 10 per 10 s period.
	instants := map[time.Duration]int{}
	for _, r := range tr.Requests {
		instants[r.At]++
	}
	if len(instants) != 3 || len(tr.Requests) != 60 {
		t.Errorf("got %d requests at %d instants, want 60 at 3", len(tr.Requests), len(instants))
	}
	for at, n := range instants {
		if n != 20 {
			t.Errorf("got %d requests at %s, want 20", n, at)
		}
	}
}

func TestPatternErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pt   Pattern
		want string
	}{
		{Pattern{Shape: "wave", Rate: 1, Duration: time.Second, Consumers: 1}, `pattern "wave": want steady, poisson or burst`},
		{Pattern{Shape: "steady", Rate: 0, Duration: time.Second, Consumers: 1}, "rate: must be > 0 requests per second"},
		{Pattern{Shape: "steady", Rate: 1, Duration: 0, Consumers: 1}, "duration: must be > 0 and at most 876000h0m0s"},
		{Pattern{Shape: "steady", Rate: 1e-9, Duration: MaxOffset + time.Hour, Consumers: 1}, "duration: must be > 0 and at most 876000h0m0s"},
		{Pattern{Shape: "steady", Rate: 1, Duration: time.Second, Consumers: 0}, "consumers: must be > 0"},
		{Pattern{Shape: "poisson", Rate: 1000, Duration: time.Hour, Consumers: 100}, "pattern: rate x duration x consumers is 360000000 requests on average, more than 20000000"},
	} {
		if _, err := tc.pt.Traffic(time.Second); err == nil || err.Error() != tc.want {
			t.Errorf("%+v: got error %v, want %q", tc.pt, err, tc.want)
		}
	}
}

// TestPatternTooBigMessageNamesNoNegativeCount: Main prefixes every
// Pattern.Traffic error with "-" to name the flag, so the error for too
// many requests must name one too rather than start with the count, which
// would read as a negative number.
func TestPatternTooBigMessageNamesNoNegativeCount(t *testing.T) {
	t.Parallel()
	code, _, stderr := run(t, nil, "-limit", "1", "-window", "1s", "-pattern", "steady", "-rate", "10000", "-duration", "1h")
	if code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
	first, _, _ := strings.Cut(stderr, "\n")
	if !strings.HasPrefix(first, "sluice simulate: -pattern: ") {
		t.Errorf("got %q, want it to name -pattern", first)
	}
}

// TestPatternBurstKeepsTheRateInAShortPeriod: README "Generated traffic",
// each consumer sends R requests per second on average for D. A duration
// that ends within a 10-second period sends that period's share of the
// rate, not a whole period's requests in the part of it that remains.
func TestPatternBurstKeepsTheRateInAShortPeriod(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		duration time.Duration
		want     int
	}{
		{time.Second, 2},
		{15 * time.Second, 30},
		{30 * time.Second, 60},
	} {
		tr, err := Pattern{Shape: "burst", Rate: 2, Duration: tc.duration, Consumers: 1, Seed: 1}.Traffic(time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if len(tr.Requests) != tc.want {
			t.Errorf("-rate 2 -duration %s: got %d requests, want %d", tc.duration, len(tr.Requests), tc.want)
		}
	}
}
