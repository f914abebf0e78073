package ratelimittest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
)

// The stress cases run many goroutines against one store at once, on
// virtual clocks that goroutines read in one order and decide in another
// (so decisions reach a bucket slightly out of time order, as from two
// gateways whose clocks differ by a little), and then check what every
// algorithm promises of the admitted requests as a whole. They assert
// invariants, never timings.

// stressWorkers and stressRounds bound each case: a few seconds on a
// loaded machine, even against Redis.
const (
	stressWorkers = 8
	stressRounds  = 150
)

// admission is one admitted request: the time it was decided at and its
// decision.
type admission struct {
	now time.Time
	d   ratelimit.Decision
}

// stressRun runs workers goroutines, each calling f rounds times with its
// goroutine index and a random source of its own, and fails t on a case
// that does not end within a minute (a deadlock).
func stressRun(t *testing.T, workers, rounds int, f func(w int, rng *rand.Rand)) {
	t.Helper()
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 0x5eed))
			for range rounds {
				f(w, rng)
			}
		})
	}
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("stress case did not end within a minute: deadlock?")
	}
}

// stressDecide is decide for goroutines other than the test's: it reports
// a failed store with t.Errorf and returns nil.
func stressDecide(t *testing.T, s ratelimit.Store, now time.Time, reqs []ratelimit.Request) []ratelimit.Decision {
	out := make([]ratelimit.Decision, len(reqs))
	if err := s.Decide(context.Background(), now, reqs, out); err != nil {
		t.Errorf("deciding at %v: %v", now, err)
		return nil
	}
	return out
}

// RunStress runs the stress cases alone (Run runs them too), for stores
// that share their state in ways the rest of the suite does not cover,
// such as several instances of a Redis store on one server. A store that
// newStore returns need not support Wait.
func RunStress(t *testing.T, newStore func(t *testing.T) ratelimit.Store) {
	t.Helper()
	runStress(t, closing(newStore))
}

// runStress checks the algorithms' promises under concurrency.
func runStress(t *testing.T, open func(*testing.T) ratelimit.Store) {
	t.Run("one key, clocks out of order", func(t *testing.T) { runStressOneKey(t, open) })
	t.Run("windows", func(t *testing.T) { runStressWindows(t, open) })
	t.Run("several limits", func(t *testing.T) { runStressMulti(t, open) })
	t.Run("refunds", func(t *testing.T) { runStressRefund(t, open) })
}

// runStressOneKey sends every worker's requests to one bucket, at times
// read from one virtual clock that advances 100µs a read, minus up to
// 3ms of lag: the order of decisions differs from the order of times by
// up to a few dozen requests.
func runStressOneKey(t *testing.T, open func(*testing.T) ratelimit.Store) {
	cases := []ratelimit.Policy{
		{Algorithm: ratelimit.SlidingWindowLog, Limit: 7, Window: 20 * ms},
		{Algorithm: ratelimit.TokenBucket, Limit: 5, Window: 10 * ms, Burst: 4},
		{Algorithm: ratelimit.LeakyBucket, Limit: 10, Window: 10 * ms, Queue: 3},
	}
	for _, pc := range cases {
		t.Run(pc.Algorithm.String(), func(t *testing.T) {
			t.Parallel()
			s := open(t)
			pc.Name = "stress-one-" + pc.Algorithm.String()
			p := mustPolicy(t, pc)
			r := []ratelimit.Request{{Policy: p, Key: "k"}}
			var clock atomic.Int64
			var mu sync.Mutex
			var got []admission
			stressRun(t, stressWorkers, stressRounds, func(_ int, rng *rand.Rand) {
				at := clock.Add(100) - rng.Int64N(3000)
				now := T0.Add(time.Duration(at) * us)
				ds := stressDecide(t, s, now, r)
				if ds != nil && ds[0].Allowed {
					mu.Lock()
					got = append(got, admission{now, ds[0]})
					mu.Unlock()
				}
			})
			if len(got) == 0 {
				t.Fatal("got no admitted request, want some")
			}
			slices.SortFunc(got, func(a, b admission) int { return a.now.Compare(b.now) })
			switch p.Algorithm {
			case ratelimit.SlidingWindowLog:
				checkLog(t, p, got)
			case ratelimit.TokenBucket:
				checkTokens(t, p, got)
			case ratelimit.LeakyBucket:
				checkDepartures(t, p, got)
			}
		})
	}
}

// checkLog checks that no half-open (t - window, t] holds more than limit
// admitted requests; got is sorted by time.
func checkLog(t *testing.T, p *ratelimit.Policy, got []admission) {
	t.Helper()
	first := 0
	for i, a := range got {
		for !got[first].now.After(a.now.Add(-p.Window)) {
			first++
		}
		if n := i - first + 1; n > int(p.Limit) {
			t.Fatalf("got %d admitted in (%v, %v], want at most %d", n, a.now.Add(-p.Window).Sub(T0), a.now.Sub(T0), p.Limit)
		}
	}
}

// checkTokens checks that any span [a, b] of decision times holds at most
// burst + (b-a)/interval admitted requests; got is sorted by time.
func checkTokens(t *testing.T, p *ratelimit.Policy, got []admission) {
	t.Helper()
	for i := range got {
		for j := i; j < len(got); j++ {
			span := got[j].now.Sub(got[i].now)
			if n, most := int64(j-i+1), p.Burst+int64(span/p.Interval()); n > most {
				t.Fatalf("got %d admitted in [%v, %v], want at most %d (burst %d + refill)", n, got[i].now.Sub(T0), got[j].now.Sub(T0), most, p.Burst)
			}
		}
	}
}

// checkDepartures checks that admitted leaky_bucket requests leave at
// least one interval apart, none waiting longer than the policy allows.
func checkDepartures(t *testing.T, p *ratelimit.Policy, got []admission) {
	t.Helper()
	deps := make([]time.Time, 0, len(got))
	for _, a := range got {
		if a.d.Delay < 0 || a.d.Delay > p.Tolerance() {
			t.Errorf("at %v: got delay %v, want within [0, %v]", a.now.Sub(T0), a.d.Delay, p.Tolerance())
		}
		deps = append(deps, a.now.Add(a.d.Delay))
	}
	slices.SortFunc(deps, time.Time.Compare)
	for i := 1; i < len(deps); i++ {
		if gap := deps[i].Sub(deps[i-1]); gap < p.Interval() {
			t.Fatalf("got departures at %v and %v, %v apart, want at least %v", deps[i-1].Sub(T0), deps[i].Sub(T0), gap, p.Interval())
		}
	}
}

// runStressWindows sends every worker's requests to one bucket of a
// windowed policy, window after window: in each the workers decide at
// random times inside it, in random order, and the next begins once all
// are done, so each request counts in the window of its own time.
func runStressWindows(t *testing.T, open func(*testing.T) ratelimit.Store) {
	cases := []ratelimit.Policy{
		{Algorithm: ratelimit.FixedWindow, Limit: 9, Window: 10 * ms},
		{Algorithm: ratelimit.SlidingWindowCounter, Limit: 9, Window: 10 * ms},
	}
	for _, pc := range cases {
		t.Run(pc.Algorithm.String(), func(t *testing.T) {
			t.Parallel()
			s := open(t)
			pc.Name = "stress-win-" + pc.Algorithm.String()
			p := mustPolicy(t, pc)
			r := []ratelimit.Request{{Policy: p, Key: "k"}}
			const windows = 12
			count := make([]int64, windows)          // admitted per window
			latest := make([]time.Duration, windows) // latest admitted offset in each
			for k := range windows {
				var mu sync.Mutex
				stressRun(t, stressWorkers, 4, func(_ int, rng *rand.Rand) {
					off := time.Duration(rng.Int64N(int64(p.Window/us))) * us
					ds := stressDecide(t, s, T0.Add(time.Duration(k)*p.Window+off), r)
					if ds != nil && ds[0].Allowed {
						mu.Lock()
						count[k]++
						latest[k] = max(latest[k], off)
						mu.Unlock()
					}
				})
			}
			for k := range windows {
				most := p.Limit
				if p.Algorithm == ratelimit.SlidingWindowCounter && k > 0 {
					// The last request counted in window k found cur =
					// count-1 there and prev = the count of window k-1,
					// at an elapsed time no later than latest[k]: it
					// needed cur + floor(prev*(w-e)/w) < limit.
					w := int64(p.Window)
					most = p.Limit - count[k-1]*(w-int64(latest[k]))/w
				}
				if count[k] > most {
					t.Errorf("window %d: got %d admitted (previous window %d), want at most %d", k, count[k], max(count[max(k-1, 0)], 0), most)
				}
			}
		})
	}
}

// runStressMulti decides requests of two routes at once that name the
// same two buckets in opposite orders, each with a gate of its own that
// rejects some of them: no deadlock, and each shared bucket is charged
// exactly once per admitted request, whichever limit rejected the others.
func runStressMulti(t *testing.T, open func(*testing.T) ratelimit.Store) {
	t.Parallel()
	s := open(t)
	// No time passes: every budget only shrinks.
	fw := mustPolicy(t, ratelimit.Policy{Name: "stress-multi-fw", Algorithm: ratelimit.FixedWindow, Limit: 200, Window: time.Hour})
	tb := mustPolicy(t, ratelimit.Policy{Name: "stress-multi-tb", Algorithm: ratelimit.TokenBucket, Limit: 1, Window: time.Hour, Burst: 150})
	log := mustPolicy(t, ratelimit.Policy{Name: "stress-multi-log", Algorithm: ratelimit.SlidingWindowLog, Limit: 120, Window: time.Hour})
	gate := mustPolicy(t, ratelimit.Policy{Name: "stress-multi-gate", Algorithm: ratelimit.FixedWindow, Limit: 90, Window: time.Hour})
	routes := [][]ratelimit.Request{
		{{Policy: fw, Key: "k1"}, {Policy: tb, Key: "k2"}, {Policy: gate, Key: "a"}},
		{{Policy: tb, Key: "k2"}, {Policy: fw, Key: "k1"}, {Policy: gate, Key: "b"}},
		{{Policy: gate, Key: "c"}, {Policy: log, Key: "k3"}, {Policy: fw, Key: "k1"}},
		{{Policy: log, Key: "k3"}, {Policy: tb, Key: "k2"}, {Policy: gate, Key: "d"}},
	}
	var admitted [4]atomic.Int64
	stressRun(t, stressWorkers, stressRounds, func(w int, rng *rand.Rand) {
		i := rng.IntN(len(routes))
		reqs := routes[i]
		ds := stressDecide(t, s, T0, reqs)
		if ds != nil && ratelimit.Admitted(reqs, ds) {
			admitted[i].Add(1)
		}
	})
	var n [4]int64
	for i := range n {
		n[i] = admitted[i].Load()
		if n[i] > gate.Limit {
			t.Errorf("route %d: got %d admitted, want at most the gate's %d", i, n[i], gate.Limit)
		}
	}
	spent := map[*ratelimit.Policy]int64{
		fw:  n[0] + n[1] + n[2],
		tb:  n[0] + n[1] + n[3],
		log: n[2] + n[3],
	}
	keys := map[*ratelimit.Policy]string{fw: "k1", tb: "k2", log: "k3"}
	for p, used := range spent {
		d := peek(t, s, T0, ratelimit.Request{Policy: p, Key: keys[p]})
		if want := p.Capacity() - used; d.Remaining != want {
			t.Errorf("%s after %d admitted requests (%v per route): got remaining %d, want %d", p.Name, used, n, d.Remaining, want)
		}
	}
}

// runStressRefund decides, refunds and keeps concurrently on held buckets
// of every algorithm that allows count_status, with no time passing: each
// bucket then ends with exactly the kept units spent.
func runStressRefund(t *testing.T, open func(*testing.T) ratelimit.Store) {
	for _, a := range []ratelimit.Algorithm{ratelimit.TokenBucket, ratelimit.FixedWindow, ratelimit.SlidingWindowLog, ratelimit.SlidingWindowCounter} {
		t.Run(a.String(), func(t *testing.T) {
			t.Parallel()
			s := open(t)
			p := mustPolicy(t, ratelimit.Policy{Name: "stress-refund-" + a.String(), Algorithm: a, Limit: 60, Window: time.Hour, Hold: true})
			// A second limit on the route, without refunds, rejects
			// some requests, which must take nothing from p.
			gate := mustPolicy(t, ratelimit.Policy{Name: "stress-refund-gate-" + a.String(), Algorithm: ratelimit.FixedWindow, Limit: 150, Window: time.Hour})
			ctx := context.Background()
			var kept atomic.Int64
			stressRun(t, stressWorkers, stressRounds, func(w int, rng *rand.Rand) {
				key := fmt.Sprint("k", rng.IntN(3))
				reqs := []ratelimit.Request{{Policy: p, Key: key}, {Policy: gate, Key: key}}
				if rng.IntN(2) == 0 {
					reqs[0], reqs[1] = reqs[1], reqs[0]
				}
				ds := stressDecide(t, s, T0, reqs)
				if ds == nil || !ratelimit.Admitted(reqs, ds) {
					return
				}
				// The response comes back: most are given back. Only p
				// counts statuses, so only its unit is settled.
				j := slices.IndexFunc(reqs, func(r ratelimit.Request) bool { return r.Policy == p })
				settle := s.Refund
				if rng.IntN(4) == 0 {
					settle = s.Keep
					kept.Add(1)
				}
				if err := settle(ctx, T0, reqs[j:j+1], ds[j:j+1]); err != nil {
					t.Errorf("settling: %v", err)
				}
			})
			// Count what each key's buckets have spent.
			var used int64
			for k := range 3 {
				d := peek(t, s, T0, ratelimit.Request{Policy: p, Key: fmt.Sprint("k", k)})
				used += p.Capacity() - d.Remaining
			}
			if want := kept.Load(); used != want {
				t.Errorf("got %d units spent over the keys, want the %d kept", used, want)
			}
		})
	}
}
