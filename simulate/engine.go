package simulate

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
)

// Request is one request of the traffic: when it arrives, as an offset from
// the traffic's origin, and which consumer sends it.
type Request struct {
	At       time.Duration
	Consumer int32 // index into Traffic.Keys
	// Override is 0 for a request the policy's own settings decide, k for
	// one that Traffic.Overrides[k-1] matched.
	Override uint16
	// GiveUp, when not 0, is how long the request's client waits in a
	// leaky_bucket queue before it goes away: a request that would wait
	// longer leaves the queue then, never reaching the upstream, and its
	// place goes to those behind it, as in the gateway.
	GiveUp time.Duration
}

// Traffic is what a simulation replays: requests in order of arrival, the
// consumers' key values and the instant offset 0 stands for.
type Traffic struct {
	// Origin is the instant offset 0 stands for, a window boundary.
	Origin time.Time
	// Keys are the consumers' bucket keys, as the gateway would build
	// them; Request.Consumer indexes it.
	Keys []string
	// Requests are sorted by At (see Sort); requests with equal At are
	// decided in their order here.
	Requests []Request
	// Clock says the origin is a real instant (a replayed log), so times
	// read best as clock times rather than offsets.
	Clock bool
	// Overrides are the policy's overrides that requests name (see
	// Request.Override), in the policy's order.
	Overrides []Override
}

// Override is one entry of a policy's overrides, as the simulator takes
// it: an exempt consumer is neither limited nor charged; any other is
// decided with Params, in buckets of the override's own, as the gateway
// keeps them.
type Override struct {
	Exempt bool
	Params Params
}

// Sort puts the requests in order of arrival, keeping the order of
// requests that arrive together.
func (t *Traffic) Sort() {
	if !slices.IsSortedFunc(t.Requests, byArrival) {
		slices.SortStableFunc(t.Requests, byArrival)
	}
}

func byArrival(a, b Request) int { return cmp.Compare(a.At, b.At) }

// Result is what one algorithm made of the traffic.
type Result struct {
	Algorithm string `json:"algorithm"`
	// Accepted counts the requests that reached the upstream, at once or
	// after waiting in the leaky_bucket queue.
	Accepted int `json:"accepted"`
	Rejected int `json:"rejected"`
	// Queued counts the accepted requests that waited first.
	Queued int `json:"queued"`
	// Peak is the most requests reaching the upstream, counted when they
	// leave, in any half-open interval (t - Window, t], all consumers
	// together: the load the upstream sees.
	Peak int `json:"peak"`
	// Departures are the offsets at which the accepted requests left for
	// the upstream, in order; kept only when Options.Departures asks.
	Departures []time.Duration `json:"-"`
	// ConsumersLimited counts the consumers that had at least one request
	// rejected; MostLimited are up to ten of them that had the most, most
	// first. Both are filled only when Options.Consumers asks.
	ConsumersLimited int        `json:"-"`
	MostLimited      []Consumer `json:"-"`
	// Lane is the algorithm's row of the timeline, when Options.Timeline
	// asks for one.
	Lane []Slice `json:"-"`
}

// Consumer is one consumer's share of an algorithm's result.
type Consumer struct {
	Key      string
	Requests int
	Rejected int
}

// Slice is what happened in one time slice of the timeline.
type Slice struct {
	// Admitted counts requests that reached the upstream at once.
	Admitted int
	// Queued counts requests that reached the upstream in this slice
	// after waiting in the leaky_bucket queue (counted when they leave).
	Queued int
	// Rejected counts requests rejected in this slice (counted when they
	// arrive).
	Rejected int
}

// Options choose what a simulation records beyond the counts.
type Options struct {
	// Algorithms to run, in this order; nil means ratelimit.Algorithms.
	Algorithms []ratelimit.Algorithm
	// Departures keeps every accepted request's departure in the result.
	Departures bool
	// Consumers counts rejections per consumer.
	Consumers bool
	// Timeline, when set, counts every result's requests in its slices.
	Timeline *Timeline
	// Accuracy, when set, compares sliding_window_counter with
	// sliding_window_log request by request; both must be among
	// Algorithms.
	Accuracy *Accuracy
}

// maxKeysFloor is the least bucket bound a simulation's store gets, so
// that eviction never changes a result: the store's default.
const maxKeysFloor = 1_000_000

// Simulate sends the traffic through each algorithm with p's settings on
// the gateway's memory store, each algorithm with its own buckets, one per
// consumer. It is a pure function of its arguments: the clock is virtual.
func Simulate(p Params, tr *Traffic, o Options) ([]Result, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	algs := o.Algorithms
	if algs == nil {
		algs = ratelimit.Algorithms
	}
	policies := make([]*ratelimit.Policy, len(algs))
	// variants[i][k] decides algorithm i's requests of override k (0: the
	// policy's own settings; nil: exempt).
	variants := make([][]*ratelimit.Policy, len(algs))
	for i, a := range algs {
		pol, err := p.policy(a)
		if err != nil {
			return nil, err
		}
		policies[i] = pol
		variants[i] = []*ratelimit.Policy{pol}
		for k, ov := range tr.Overrides {
			var op *ratelimit.Policy
			if !ov.Exempt {
				if op, err = ov.Params.policy(a); err != nil {
					return nil, fmt.Errorf("override %d: %w", k+1, err)
				}
				// As the gateway names it, so that overrides with
				// the same numbers share buckets here too.
				op.Name = routes.OverrideName(op.Name, op)
			}
			variants[i] = append(variants[i], op)
		}
	}
	nc := len(tr.Keys)
	for _, r := range tr.Requests {
		if r.Consumer < 0 || int(r.Consumer) >= nc {
			return nil, fmt.Errorf("request at %s: consumer %d of %d", r.At, r.Consumer, nc)
		}
		if int(r.Override) > len(tr.Overrides) {
			return nil, fmt.Errorf("request at %s: override %d of %d", r.At, r.Override, len(tr.Overrides))
		}
	}
	lanes := make([]*lane, len(policies))
	counter, exact := -1, -1
	for i, pol := range policies {
		l := &lane{res: Result{Algorithm: pol.Algorithm.String()}, pols: variants[i], peak: window{span: int64(p.Window)}}
		if o.Departures {
			l.res.Departures = make([]time.Duration, 0, min(len(tr.Requests), 1024))
		}
		if o.Consumers {
			l.rejected = make([]int32, nc)
		}
		if o.Timeline != nil {
			l.slices = make([]Slice, o.Timeline.Slices)
		}
		switch pol.Algorithm {
		case ratelimit.SlidingWindowCounter:
			counter = i
		case ratelimit.SlidingWindowLog:
			exact = i
		}
		lanes[i] = l
	}
	acc := o.Accuracy
	if acc != nil {
		if counter < 0 || exact < 0 {
			return nil, fmt.Errorf("measuring accuracy needs sliding_window_counter and sliding_window_log")
		}
		*acc = Accuracy{Limit: p.Limit, Window: p.Window, Requests: len(tr.Requests), Consumers: nc, Origin: tr.Origin, Clock: tr.Clock}
		for _, i := range []int{counter, exact} {
			lanes[i].allowed = make([]uint64, (len(tr.Requests)+63)/64)
		}
	}
	tl := o.Timeline

	// The algorithms share nothing, so each runs on its own goroutine
	// with its own store, sized so that no bucket is ever evicted.
	var wg sync.WaitGroup
	for _, l := range lanes {
		wg.Go(func() { l.err = l.run(tr, tl, o.Departures, max(maxKeysFloor, 2*nc)) })
	}
	wg.Wait()
	results := make([]Result, len(lanes))
	for i, l := range lanes {
		if l.err != nil {
			return nil, l.err
		}
		if o.Consumers {
			l.res.ConsumersLimited, l.res.MostLimited = mostLimited(tr, l.rejected, 10)
		}
		l.res.Lane = l.slices
		results[i] = l.res
	}
	if acc != nil {
		var admits []Request // sliding_window_counter's, for its worst window
		c, e := lanes[counter].allowed, lanes[exact].allowed
		for i, rq := range tr.Requests {
			bit := uint64(1) << (i % 64)
			ca, ea := c[i/64]&bit != 0, e[i/64]&bit != 0
			acc.add(ca, ea)
			if ca {
				admits = append(admits, rq)
			}
		}
		acc.worst(admits, tr)
	}
	return results, nil
}

// lane is one algorithm's run over the traffic.
type lane struct {
	res      Result
	pols     []*ratelimit.Policy // by Request.Override; nil: exempt
	peak     window
	pending  heap // leaky_bucket departures still ahead
	rejected []int32
	slices   []Slice
	allowed  []uint64 // a bit per request, for Accuracy
	err      error
}

// run decides every request of tr on a store of its own.
func (l *lane) run(tr *Traffic, tl *Timeline, departures bool, maxKeys int) error {
	// The store's clock is virtual too: a give-up moves a bucket through
	// calls that read it.
	var now int64
	store := ratelimit.NewMemoryStore(ratelimit.MemoryOptions{SweepInterval: -1, MaxKeys: maxKeys,
		Clock: func() time.Time { return tr.Origin.Add(time.Duration(now)) }})
	defer store.Close()
	qs := newQueues(tr)
	// leave records a departure, in order of time.
	leave := func(at int64, queued bool) {
		l.res.Peak = max(l.res.Peak, l.peak.add(at))
		if departures {
			l.res.Departures = append(l.res.Departures, time.Duration(at))
		}
		if tl != nil {
			s := &l.slices[tl.index(time.Duration(at))]
			if queued {
				s.Queued++
			} else {
				s.Admitted++
			}
		}
	}
	ctx := context.Background()
	var reqs [1]ratelimit.Request
	var out [1]ratelimit.Decision
	// settle takes the departures and give-ups due by until, in order.
	settle := func(until int64) error {
		for {
			p := int64(math.MaxInt64)
			if len(l.pending) > 0 {
				p = l.pending[0]
			}
			e := qs.next()
			switch {
			case min(p, e) > until || len(l.pending) == 0 && e == math.MaxInt64:
				return nil
			case p <= e:
				leave(l.pending.pop(), true)
				continue
			}
			now = e
			ev, left, dropped, err := qs.handle(store, tr.Origin)
			if err != nil {
				return fmt.Errorf("deciding %s at %s: %w", l.res.Algorithm, time.Duration(ev.at), err)
			}
			switch {
			case left:
				leave(ev.at, true)
			case dropped:
				// Counted when it was admitted; it never reached
				// the upstream.
				l.res.Accepted--
				l.res.Queued--
			}
		}
	}
	for i, rq := range tr.Requests {
		at := int64(rq.At)
		if err := settle(at); err != nil {
			return err
		}
		now = at
		pol := l.pols[rq.Override]
		if pol == nil {
			// Exempt: through at once, charging nothing.
			out[0] = ratelimit.Decision{Allowed: true}
		} else {
			reqs[0] = ratelimit.Request{Policy: pol, Key: tr.Keys[rq.Consumer]}
			if err := store.Decide(ctx, tr.Origin.Add(rq.At), reqs[:], out[:]); err != nil {
				return fmt.Errorf("deciding %s at %s: %w", l.res.Algorithm, rq.At, err)
			}
		}
		d := &out[0]
		if !d.Allowed {
			l.res.Rejected++
			if l.rejected != nil {
				l.rejected[rq.Consumer]++
			}
			if tl != nil {
				l.slices[tl.index(rq.At)].Rejected++
			}
			continue
		}
		if l.allowed != nil {
			l.allowed[i/64] |= 1 << (i % 64)
		}
		l.res.Accepted++
		if d.Delay > 0 {
			l.res.Queued++
			if qs != nil && qs.tracked[rq.Consumer] {
				qs.wait(rq, reqs[0], at, at+int64(d.Delay))
			} else {
				l.pending.push(at + int64(d.Delay))
			}
			continue
		}
		leave(at, false)
	}
	return settle(math.MaxInt64)
}

// mostLimited counts the consumers with a rejection and returns the n with
// the most, most first; ties go by key.
func mostLimited(tr *Traffic, rejected []int32, n int) (int, []Consumer) {
	var ids []int32
	for c, r := range rejected {
		if r > 0 {
			ids = append(ids, int32(c))
		}
	}
	slices.SortFunc(ids, func(a, b int32) int {
		if c := cmp.Compare(rejected[b], rejected[a]); c != 0 {
			return c
		}
		return cmp.Compare(tr.Keys[a], tr.Keys[b])
	})
	top := ids[:min(n, len(ids))]
	if len(top) == 0 {
		return 0, nil
	}
	requests := make(map[int32]int, len(top))
	for _, c := range top {
		requests[c] = 0
	}
	for _, r := range tr.Requests {
		if _, ok := requests[r.Consumer]; ok {
			requests[r.Consumer]++
		}
	}
	out := make([]Consumer, len(top))
	for i, c := range top {
		out[i] = Consumer{Key: tr.Keys[c], Requests: requests[c], Rejected: int(rejected[c])}
	}
	return len(ids), out
}

// window counts departures fed in order of time within the last span:
// the half-open interval (t - span, t] at the latest departure t.
type window struct {
	span int64
	ring []int64
	head int // index of the oldest
	n    int
}

// add records a departure at t, no earlier than the last, and returns how
// many departures (t - span, t] holds.
func (w *window) add(t int64) int {
	for w.n > 0 && w.ring[w.head] <= t-w.span {
		w.head = (w.head + 1) % len(w.ring)
		w.n--
	}
	if w.n == len(w.ring) {
		grown := make([]int64, max(16, 2*len(w.ring)))
		for i := range w.n {
			grown[i] = w.ring[(w.head+i)%len(w.ring)]
		}
		w.ring, w.head = grown, 0
	}
	w.ring[(w.head+w.n)%len(w.ring)] = t
	w.n++
	return w.n
}

// heap is a binary min-heap of departure times.
type heap []int64

func (h *heap) push(t int64) {
	*h = append(*h, t)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if s[p] <= s[i] {
			break
		}
		s[p], s[i] = s[i], s[p]
		i = p
	}
}

func (h *heap) pop() int64 {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(s) && s[l] < s[m] {
			m = l
		}
		if r < len(s) && s[r] < s[m] {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

// Run sends the arrivals, in order of offset (groups with equal offsets in
// the order given), through every algorithm in ratelimit.Algorithms order,
// each with its own bucket for one consumer, and returns one Result per
// algorithm with its departures. It is a pure function of its arguments.
func Run(p Params, arrivals []Arrival) ([]Result, error) {
	tr, err := FromArrivals(p.Window, arrivals)
	if err != nil {
		return nil, err
	}
	return Simulate(p, tr, Options{Departures: true})
}

// FromArrivals makes the traffic of an -at pattern: one consumer, the
// origin at a window boundary.
func FromArrivals(window time.Duration, arrivals []Arrival) (*Traffic, error) {
	total := 0
	for _, a := range arrivals {
		if a.Count < 0 {
			return nil, fmt.Errorf("arrival %d@%s: count must be >= 0", a.Count, a.Offset)
		}
		if a.Offset < 0 {
			return nil, fmt.Errorf("arrival %d@%s: offset must be >= 0", a.Count, a.Offset)
		}
		if total += a.Count; total > MaxRequests {
			return nil, fmt.Errorf("simulating more than %d requests", MaxRequests)
		}
	}
	tr := &Traffic{Origin: Origin(window), Keys: []string{"simulate"}, Requests: make([]Request, 0, total)}
	for _, a := range arrivals {
		for range a.Count {
			tr.Requests = append(tr.Requests, Request{At: a.Offset})
		}
	}
	tr.Sort()
	return tr, nil
}
