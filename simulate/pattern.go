package simulate

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// Patterns are the generated traffic shapes -pattern names.
var Patterns = []string{"steady", "poisson", "burst"}

// burstPeriod is how often a consumer of the burst pattern sends.
const burstPeriod = 10 * time.Second

// Pattern describes generated traffic: Consumers consumers, each sending
// Rate requests per second on average for Duration.
type Pattern struct {
	// Shape is one of Patterns:
	//   - steady: each consumer sends one request every 1/Rate seconds,
	//     the consumers evenly staggered;
	//   - poisson: each consumer's requests arrive at random, independent
	//     of each other (a Poisson process of rate Rate);
	//   - burst: each consumer sends a period's requests (Rate x 10s, on
	//     average; less in a last period that Duration cuts short) all at
	//     once, at a random instant of every 10 s period.
	Shape     string
	Rate      float64
	Duration  time.Duration
	Consumers int
	// Seed makes the random shapes repeatable: equal patterns give equal
	// traffic.
	Seed uint64
}

// Traffic generates the pattern's requests from a window boundary, like
// -at's offsets; consumers are named consumer-1, consumer-2, ...
func (pt Pattern) Traffic(window time.Duration) (*Traffic, error) {
	switch {
	case !slices.Contains(Patterns, pt.Shape):
		return nil, fmt.Errorf("pattern %q: want steady, poisson or burst", pt.Shape)
	case !(pt.Rate > 0) || math.IsInf(pt.Rate, 0):
		return nil, fmt.Errorf("rate: must be > 0 requests per second")
	case pt.Duration <= 0 || pt.Duration > MaxOffset:
		return nil, fmt.Errorf("duration: must be > 0 and at most %s", MaxOffset)
	case pt.Consumers <= 0:
		return nil, fmt.Errorf("consumers: must be > 0")
	}
	if n := pt.Rate * pt.Duration.Seconds() * float64(pt.Consumers); n > MaxTraffic {
		return nil, fmt.Errorf("pattern: rate x duration x consumers is %.0f requests on average, more than %d", n, MaxTraffic)
	}
	tr := &Traffic{Origin: Origin(window), Keys: make([]string, pt.Consumers)}
	for i := range tr.Keys {
		tr.Keys[i] = fmt.Sprintf("consumer-%d", i+1)
	}
	rng := rand.New(rand.NewPCG(pt.Seed, 0x736c75696365)) // "sluice"
	end := float64(pt.Duration)
	n := pt.Consumers
	switch pt.Shape {
	case "steady":
		// A rate below about 1e-291 makes the gap +Inf, and the first
		// request's time 0 x +Inf, no number; capped, it is 0.
		gap := min(float64(time.Second)/pt.Rate, math.MaxFloat64)
		for k := 0; ; k++ {
			for c := range n {
				t := (float64(k) + float64(c)/float64(n)) * gap
				if t >= end {
					if c == 0 {
						return tr, nil
					}
					break
				}
				tr.Requests = append(tr.Requests, Request{At: time.Duration(t), Consumer: int32(c)})
			}
		}
	case "poisson":
		// n Poisson processes of rate Rate together are one of rate
		// n x Rate whose arrivals belong to a consumer picked at random.
		mean := float64(time.Second) / (pt.Rate * float64(n))
		for t := rng.ExpFloat64() * mean; t < end; t += rng.ExpFloat64() * mean {
			tr.Requests = append(tr.Requests, Request{At: time.Duration(t), Consumer: int32(rng.IntN(n))})
		}
	case "burst":
		for from := time.Duration(0); from < pt.Duration; from += burstPeriod {
			start := len(tr.Requests)
			span := min(burstPeriod, pt.Duration-from)
			// A last period cut short by the duration sends its
			// share of the rate, not a whole period's requests.
			per := pt.Rate * span.Seconds()
			for c := range n {
				at := from + time.Duration(rng.Int64N(int64(span)))
				// A fractional size is rounded at random, keeping the
				// average.
				size := int(per)
				if rng.Float64() < per-float64(size) {
					size++
				}
				for range size {
					tr.Requests = append(tr.Requests, Request{At: at, Consumer: int32(c)})
				}
			}
			slices.SortStableFunc(tr.Requests[start:], byArrival)
		}
	}
	return tr, nil
}
