package e2e

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// leaseConfig is a gateway on the Redis store at addr with the policies
// given (YAML lines under policies:, each named after its route's path), a
// route /NAME per policy and a route /free without a limit.
func leaseConfig(addr, upstream, redis string, policies ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\nlog: {access_log: false}\nshutdown_timeout: 5s\n")
	fmt.Fprintf(&b, "store:\n  type: redis\n  redis: {addresses: [%q], %s}\n", addr, redis)
	fmt.Fprintf(&b, "policies:\n")
	var names []string
	for _, p := range policies {
		fmt.Fprintf(&b, "  %s\n", p)
		name, _, _ := strings.Cut(p, ":")
		names = append(names, name)
	}
	fmt.Fprintf(&b, "routes:\n  - {name: free, match: {path_prefix: /free}, upstream: %s}\n", upstream)
	for _, n := range names {
		fmt.Fprintf(&b, "  - {name: %s, match: {path_prefix: /%[1]s}, upstream: %s, limits: [%[1]s]}\n", n, upstream)
	}
	return b.String()
}

// waitInstances waits until every instance has seen n instances alive
// through the heartbeats in Redis.
func waitInstances(t *testing.T, ins []*instance, n float64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, in := range ins {
		for {
			got := scrape(t, in.Admin)["sluice_ratelimit_lease_instances"]
			if got == n {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("sluice_ratelimit_lease_instances: got %v, want %v within 10s of start", got, n)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// warmUp sends each instance one request on the route /warm, which starts
// its heartbeats, and waits until all of them see each other.
func warmUp(t *testing.T, ins []*instance) {
	t.Helper()
	for _, in := range ins {
		if resp, _ := do(t, nil, "GET", in.HTTP+"/warm", nil, nil); resp.StatusCode != 200 {
			t.Fatalf("GET /warm: got %d, want 200", resp.StatusCode)
		}
	}
	waitInstances(t, ins, float64(len(ins)))
}

// noFallback fails the test if an instance fell back to deciding locally:
// from then on the instances are not exact together, which is what the
// caller is about to check.
func noFallback(t *testing.T, ins []*instance) {
	t.Helper()
	for i, in := range ins {
		if l, ok := in.WaitLog(0, "lease fallback"); ok {
			t.Fatalf("instance %d fell back with Redis up: %s", i, l)
		}
	}
}

// phase is one run of skewed load on one route of the three instances.
type phase struct {
	w        time.Duration
	shots    []shot
	adm      []admission
	full     []int64        // windows the load covered entirely
	calls    int            // Redis round trips during the steady part
	commands map[string]int // every command Redis ran then, scripts' included
	requests int            // requests sent during the steady part
}

// skewShare is the traffic of the three instances: 80%, 15% and 5%.
var skewShare = []int{16, 3, 1}

// runPhase loads path with rate requests per second split 80/15/5 over
// the instances, from a second before the next aligned window of w until
// the end of the third, and counts Redis' round trips over the last two
// (the first lets the instances' batch sizes settle).
func runPhase(t *testing.T, rs *redistest.Server, up *upstream, ins []*instance, path string, w time.Duration, rate float64) phase {
	t.Helper()
	k0 := windowOf(time.Now(), w) + 1
	steadyFrom, steadyTo := windowStart(k0+1, w), windowStart(k0+3, w)
	until := steadyTo.Add(150 * time.Millisecond)
	time.Sleep(time.Until(windowStart(k0, w).Add(-time.Second)))
	done := make(chan []shot)
	go func() { done <- pace(t, ins, path, rate, skewShare, until) }()
	time.Sleep(time.Until(steadyFrom))
	c0, by0 := commandCalls(t, rs)
	at0 := time.Now()
	time.Sleep(time.Until(steadyTo))
	at1 := time.Now()
	c1, by1 := commandCalls(t, rs)
	p := phase{w: w, shots: <-done, commands: callsDelta(by0, by1)}
	p.calls = roundTrips(t, p.commands)
	t.Logf("Redis ran %d commands in all during the steady part, scripts' own included", c1-c0)
	for _, s := range p.shots {
		if !s.start.Before(at0) && s.start.Before(at1) {
			p.requests++
		}
	}
	p.adm = admissions(t, up, path, p.shots)
	p.full = fullWindows(p.shots, w)
	return p
}

// checkLoad requires the answers to be 200 or 429 within bound, and the
// machine to have sent at least 1.5 times what one window admits into each
// full window (the tests ask for twice): the use checks mean nothing
// without demand beyond the limit.
func (p phase) checkLoad(t *testing.T, perWindow float64) {
	t.Helper()
	ok, rejected := checkAnswers(t, p.shots, 5*time.Second)
	t.Logf("%d requests: %d admitted, %d rejected; Redis calls %d for %d requests in the steady windows (%v)", len(p.shots), ok, rejected, p.calls, p.requests, p.commands)
	if len(p.full) < 3 {
		t.Fatalf("load covered %d full windows, want 3", len(p.full))
	}
	for _, k := range p.full {
		if d := demand(p.shots, p.w, k); float64(d) < 1.5*perWindow {
			t.Errorf("window %s: the machine sent only %d requests, want at least %.0f (demand beyond the limit)", windowStart(k, p.w).Format("15:04:05"), d, 1.5*perWindow)
		}
	}
}

// checkCost holds the promise that under steady traffic Redis calls are at
// most one fifth of the requests, counted by Redis itself.
func (p phase) checkCost(t *testing.T) {
	t.Helper()
	if p.calls*5 > p.requests {
		t.Errorf("Redis calls: got %d for %d requests (%v), want at most a fifth", p.calls, p.requests, p.commands)
	}
}

// TestLeaseSkewedThreeInstances runs three instances on one redis-server
// with 80%, 15% and 5% of the traffic, at twice what each lease policy
// admits, and holds every policy to what it admits for the combined
// traffic, the use of at least 90% of the budget, and the cost of at most
// one Redis call per five requests. It is not parallel: it measures.
func TestLeaseSkewedThreeInstances(t *testing.T) {
	rs := redistest.Start(t)
	up := newUpstream(t)
	// Each instance holds at most limit / (10 N) units at once, 20 here:
	// enough for batches to pay for their round trips at this rate.
	const (
		w     = 4 * time.Second
		limit = 600
		burst = 600
	)
	// A timeout far above any round trip to a local Redis: a decision that
	// fell back to the instance's own limit/N would not be exact together,
	// and this test is about the shared budget.
	cfg := leaseConfig(rs.Addr(), up.URL, "timeout: 1s",
		"warm: {algorithm: fixed_window, limit: 1000, window: 1h, key: [global], sync: lease}",
		fmt.Sprintf("fixed: {algorithm: fixed_window, limit: %d, window: 4s, key: [global], sync: lease}", limit),
		fmt.Sprintf("bucket: {algorithm: token_bucket, limit: %d, window: 4s, burst: %d, key: [global], sync: lease}", limit, burst),
		fmt.Sprintf("counter: {algorithm: sliding_window_counter, limit: %d, window: 4s, key: [global], sync: lease}", limit),
	)
	path := writeConfig(t, cfg)
	ins := []*instance{start(t, path), start(t, path), start(t, path)}
	warmUp(t, ins)
	rate := 2 * float64(limit) / w.Seconds()

	t.Run("fixed_window", func(t *testing.T) {
		p := runPhase(t, rs, up, ins, "/fixed", w, rate)
		noFallback(t, ins)
		p.checkLoad(t, limit)
		checkPerWindow(t, p.adm, w, limit)
		// Demand is twice the limit in every full window, so the budget
		// runs out with traffic still coming to every instance: all of it
		// is spent, exactly limit per window.
		for _, k := range p.full {
			if most, least := windowCounts(p.adm, w, k); most < limit {
				t.Errorf("window %s: %d admitted (%d certainly in it), want exactly %d", windowStart(k, w).Format("15:04:05"), most, least, limit)
			}
		}
		p.checkCost(t)
	})

	t.Run("token_bucket", func(t *testing.T) {
		p := runPhase(t, rs, up, ins, "/bucket", w, rate)
		noFallback(t, ins)
		p.checkLoad(t, limit) // the bucket refills limit per window
		r := float64(limit) / w.Seconds()
		checkTokenBucket(t, p.adm, burst, r)
		// The bucket is fresh and full at the first request; after that
		// it refills at r. At least 90% of that is admitted.
		first, last := p.shots[0].start, p.shots[len(p.shots)-1].end
		budget := burst + r*last.Sub(first).Seconds()
		if n := float64(len(p.adm)); n < 0.9*budget {
			t.Errorf("admitted %v over %s, want at least 90%% of the %.0f the bucket admits", n, last.Sub(first).Round(time.Millisecond), budget)
		}
		p.checkCost(t)
	})

	t.Run("sliding_window_counter", func(t *testing.T) {
		p := runPhase(t, rs, up, ins, "/counter", w, rate)
		noFallback(t, ins)
		p.checkLoad(t, limit)
		checkCounter(t, p.adm, w, limit)
		// After the first full window the previous one is full too, so
		// the estimate lets through close to limit per window: at least
		// 90% of it is used.
		for _, k := range p.full[1:] {
			if most, _ := windowCounts(p.adm, w, k); float64(most) < 0.9*limit {
				t.Errorf("window %s: %d admitted, want at least 90%% of %d", windowStart(k, w).Format("15:04:05"), most, limit)
			}
		}
		p.checkCost(t)
	})
}

// checkTokenBucket holds a token bucket's promise over the admissions: in
// any interval [a, b] at most burst + r·(b-a) requests are admitted. Only
// admissions whose whole [lo, hi] lies within [a, b] are counted, so the
// client's uncertainty never counts against the gateway; every a is an
// admission's lo and every b an admission's hi, which covers every
// interval the timings can convict.
func checkTokenBucket(t *testing.T, adm []admission, burst int, r float64) {
	t.Helper()
	byHi := slices.Clone(adm)
	slices.SortFunc(byHi, func(x, y admission) int { return x.hi.Compare(y.hi) })
	worst, worstA, worstB, worstN := math.Inf(-1), time.Time{}, time.Time{}, 0
	for _, from := range adm {
		a := from.lo
		n := 0
		for _, x := range byHi {
			if x.lo.Before(a) {
				continue
			}
			n++
			if over := float64(n) - (float64(burst) + r*x.hi.Sub(a).Seconds()); over > worst {
				worst, worstA, worstB, worstN = over, a, x.hi, n
			}
		}
	}
	if worst > 0 {
		t.Errorf("%d admitted in %s (from %s), want at most burst %d + %.0f/s × that = %.1f",
			worstN, worstB.Sub(worstA), worstA.Format("15:04:05.000"), burst, r, float64(burst)+r*worstB.Sub(worstA).Seconds())
	}
}

// checkCounter holds a sliding window counter's promise over the
// admissions: a request is admitted at τ in window k only while
// cur + prev·(1-f(τ)) < limit, so at every τ the admissions of window k up
// to τ number less than limit + 1 - prev·(1-f(τ)), and at most limit in
// all. prev is taken as the admissions certainly in window k-1 and cur as
// those certainly in k before τ, lower bounds both, which can only loosen
// the check, never fail it wrongly.
func checkCounter(t *testing.T, adm []admission, w time.Duration, limit int) {
	t.Helper()
	checkPerWindow(t, adm, w, limit)
	byHi := slices.Clone(adm)
	slices.SortFunc(byHi, func(x, y admission) int { return x.hi.Compare(y.hi) })
	cur, prevs := map[int64]int{}, map[int64]int{}
	for _, x := range adm {
		if k := windowOf(x.lo, w); windowOf(x.hi, w) == k {
			prevs[k+1]++
		}
	}
	for _, x := range byHi {
		k := windowOf(x.lo, w)
		if windowOf(x.hi, w) != k {
			continue
		}
		cur[k]++
		prev := prevs[k]
		weight := float64(windowStart(k+1, w).Sub(x.hi)) / float64(w)
		if bound := float64(limit) + 1 - float64(prev)*weight; float64(cur[k]) >= bound {
			t.Errorf("window %s: %d admitted by %s with %d in the window before, want fewer than %.2f",
				windowStart(k, w).Format("15:04:05"), cur[k], x.hi.Format("15:04:05.000"), prev, bound)
			return
		}
	}
}
