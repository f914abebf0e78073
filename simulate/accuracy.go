package simulate

import "time"

// Cloudflare's published measurement of its sliding window counter against
// an exact count, the figure -accuracy prints beside its own.
const (
	CloudflareWrongShare = 0.003 // percent of requests wrongly allowed or limited
	CloudflareRequests   = 400_000_000
)

// Accuracy compares sliding_window_counter's decisions with the exact
// sliding_window_log's, both run side by side over the same traffic with
// the same limit, each with its own buckets.
type Accuracy struct {
	Limit     int64
	Window    time.Duration
	Requests  int
	Consumers int
	// WronglyAllowed counts requests the counter admitted and the log
	// rejected; WronglyLimited those the counter rejected and the log
	// admitted.
	WronglyAllowed int
	WronglyLimited int
	// CounterAdmitted and ExactAdmitted count the requests each admitted.
	// Only admitted requests are counted, so once one decision differs
	// the two hold different histories and later decisions may differ
	// too; the totals show what that drift amounts to.
	CounterAdmitted int
	ExactAdmitted   int
	// WorstAdmitted is the most requests the counter admitted for one
	// consumer in any half-open interval (t - Window, t]: the log never
	// admits more than Limit. WorstConsumer and WorstAt say whose window
	// it was and where it ended; WorstConsumer is "" when the counter
	// admitted nothing.
	WorstAdmitted int
	WorstConsumer string
	WorstAt       time.Duration
	// Origin and Clock are the traffic's, to name WorstAt.
	Origin time.Time
	Clock  bool
}

// worstAt names the end of the worst window: a clock time for a replayed
// log, else an offset from the origin.
func (a *Accuracy) worstAt() string {
	if a.Clock {
		return a.Origin.Add(a.WorstAt).UTC().Format(time.RFC3339Nano)
	}
	return shortDuration(a.WorstAt)
}

// Differ counts the decisions that differ.
func (a *Accuracy) Differ() int { return a.WronglyAllowed + a.WronglyLimited }

// OverAdmission is how many requests beyond the limit the counter admitted
// in its worst window, 0 when it never exceeded the limit.
func (a *Accuracy) OverAdmission() int { return max(0, a.WorstAdmitted-int(a.Limit)) }

// Share returns n as a percentage of the requests.
func (a *Accuracy) Share(n int) float64 {
	if a.Requests == 0 {
		return 0
	}
	return 100 * float64(n) / float64(a.Requests)
}

func (a *Accuracy) add(counter, exact bool) {
	if counter {
		a.CounterAdmitted++
	}
	if exact {
		a.ExactAdmitted++
	}
	switch {
	case counter && !exact:
		a.WronglyAllowed++
	case !counter && exact:
		a.WronglyLimited++
	}
}

// worst finds the counter's fullest window per consumer; admits are its
// admitted requests in order of arrival, and admission is departure for
// the counter.
func (a *Accuracy) worst(admits []Request, tr *Traffic) {
	// Group by consumer, keeping the order of time: a counting sort.
	start := make([]int, len(tr.Keys)+1)
	for _, r := range admits {
		start[r.Consumer+1]++
	}
	for c := 1; c < len(start); c++ {
		start[c] += start[c-1]
	}
	at := make([]time.Duration, len(admits))
	next := append([]int(nil), start[:len(tr.Keys)]...)
	for _, r := range admits {
		at[next[r.Consumer]] = r.At
		next[r.Consumer]++
	}
	for c := range tr.Keys {
		ts := at[start[c]:start[c+1]]
		lo := 0
		for hi, t := range ts {
			for ts[lo] <= t-a.Window {
				lo++
			}
			// The last of requests arriving together sees them all; a
			// strict comparison keeps the earliest of equal windows.
			if n := hi - lo + 1; n > a.WorstAdmitted || n == a.WorstAdmitted && a.WorstConsumer != "" && t < a.WorstAt {
				a.WorstAdmitted, a.WorstConsumer, a.WorstAt = n, tr.Keys[c], t
			}
		}
	}
}
