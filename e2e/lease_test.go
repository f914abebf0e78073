package e2e

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"syscall"
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
		fmt.Fprintf(&b, "  - {name: %s, match: {path_prefix: /%[1]s/}, upstream: %s, limits: [%[1]s]}\n", n, upstream)
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
	go func() { done <- pace(t, ins, path, rate, skewShare, until, nil) }()
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

// checkLoad requires the answers to be 200 or 429 within bound, and
// returns the full windows into which the machine sent at least 1.5 times
// what one window admits (the tests ask for twice): the use checks mean
// nothing without demand beyond the limit, and are made in those windows
// only. A machine too busy to send that much into a window lowers the rate
// instead (pace never has more than 256 requests out); that says nothing
// of sluice, and failed the test on a busy machine, so such a window is
// logged and left out. The exactness checks hold in every window; one
// full window with the demand is required.
func (p phase) checkLoad(t *testing.T, perWindow float64) (loaded []int64) {
	t.Helper()
	ok, rejected := checkAnswers(t, p.shots, 5*time.Second)
	t.Logf("%d requests: %d admitted, %d rejected; Redis calls %d for %d requests in the steady windows (%v)", len(p.shots), ok, rejected, p.calls, p.requests, p.commands)
	if len(p.full) < 3 {
		t.Fatalf("load covered %d full windows, want 3", len(p.full))
	}
	for _, k := range p.full {
		if d := demand(p.shots, p.w, k); float64(d) < 1.5*perWindow {
			t.Logf("window %s: the machine sent only %d requests, under %.0f (demand beyond the limit): no use check in it", windowStart(k, p.w).Format("15:04:05"), d, 1.5*perWindow)
			continue
		}
		loaded = append(loaded, k)
	}
	if len(loaded) == 0 {
		t.Errorf("in none of %d full windows did the machine send at least %.0f requests (demand beyond the limit)", len(p.full), 1.5*perWindow)
	}
	return loaded
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
		loaded := p.checkLoad(t, limit)
		checkPerWindow(t, p.adm, w, limit)
		// Demand is twice the limit in every full window, so the budget
		// runs out with traffic still coming to every instance: all of it
		// is spent, exactly limit per window.
		for _, k := range loaded {
			if most, least := windowCounts(p.adm, w, k); most < limit {
				t.Errorf("window %s: %d admitted (%d certainly in it), want exactly %d", windowStart(k, w).Format("15:04:05"), most, least, limit)
			}
		}
		p.checkCost(t)
	})

	t.Run("token_bucket", func(t *testing.T) {
		p := runPhase(t, rs, up, ins, "/bucket", w, rate)
		noFallback(t, ins)
		loaded := p.checkLoad(t, limit) // the bucket refills limit per window
		r := float64(limit) / w.Seconds()
		checkTokenBucket(t, p.adm, burst, r)
		// The bucket is fresh and full at the first request; after that
		// it refills at r. At least 90% of that is admitted, when the
		// demand was there throughout.
		first, last := p.shots[0].start, p.shots[len(p.shots)-1].end
		budget := burst + r*last.Sub(first).Seconds()
		if n := float64(len(p.adm)); len(loaded) < len(p.full) {
			t.Logf("admitted %v over %s, of the %.0f the bucket admits: not checked, the demand fell short in a window", n, last.Sub(first).Round(time.Millisecond), budget)
		} else if n < 0.9*budget {
			t.Errorf("admitted %v over %s, want at least 90%% of the %.0f the bucket admits", n, last.Sub(first).Round(time.Millisecond), budget)
		}
		p.checkCost(t)
	})

	t.Run("sliding_window_counter", func(t *testing.T) {
		p := runPhase(t, rs, up, ins, "/counter", w, rate)
		noFallback(t, ins)
		loaded := p.checkLoad(t, limit)
		checkCounter(t, p.adm, w, limit)
		// After the first full window the previous one is full too, so
		// the estimate lets through close to limit per window: at least
		// 90% of it is used. (Less demand in the previous window only
		// lets more through in this one.)
		for _, k := range loaded {
			if k == p.full[0] {
				continue
			}
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
func checkTokenBucket(t reporter, adm []admission, burst int, r float64) {
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
func checkCounter(t reporter, adm []admission, w time.Duration, limit int) {
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

// leaseMetric reads one series of policy from an instance's /metrics.
func leaseMetric(t *testing.T, in *instance, series, policy, result string) float64 {
	t.Helper()
	name := fmt.Sprintf(`%s{policy=%q}`, series, policy)
	if result != "" {
		name = fmt.Sprintf(`%s{policy=%q,result=%q}`, series, policy, result)
	}
	return scrape(t, in.Admin)[name]
}

// waitAll waits up to d until cond holds for every instance, and returns
// when the last one got there.
func waitAll(t *testing.T, ins []*instance, d time.Duration, what string, cond func(*instance) bool) time.Time {
	t.Helper()
	deadline := time.Now().Add(d)
	for i, in := range ins {
		for !cond(in) {
			if time.Now().After(deadline) {
				t.Fatalf("instance %d: %s did not happen within %s", i, what, d)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return time.Now()
}

// TestLeaseRedisDownFallsBackAndResumes kills redis-server under skewed
// load and restarts it on the same port: every request is answered 200 or
// 429 in about the time the machine takes without a limit, each instance
// says it falls back and then admits at most limit/N per window on its
// own, and when Redis is back every instance leases again and the
// instances are exact together again. It is not parallel: it measures.
func TestLeaseRedisDownFallsBackAndResumes(t *testing.T) {
	rs := redistest.Start(t)
	up := newUpstream(t)
	const (
		w     = 2 * time.Second
		limit = 300
		n     = 3
	)
	cfg := leaseConfig(rs.Addr(), up.URL, "timeout: 50ms, on_error: local",
		"warm: {algorithm: fixed_window, limit: 1000, window: 1h, key: [global], sync: lease}",
		fmt.Sprintf("fixed: {algorithm: fixed_window, limit: %d, window: 2s, key: [global], sync: lease}", limit),
	)
	path := writeConfig(t, cfg)
	ins := []*instance{start(t, path), start(t, path), start(t, path)}
	// The fallback gauge is there from the start, at 0, so an alert on
	// it finds a series before anything went wrong.
	if v, ok := scrape(t, ins[0].Admin)[`sluice_ratelimit_lease_fallback{policy="fixed"}`]; !ok || v != 0 {
		t.Errorf("before any request: lease_fallback got %v (present %v), want 0", v, ok)
	}
	warmUp(t, ins)

	// The load runs until stop is closed; a light load on the route
	// without a limit, sent the same way at the same times, shows how
	// long the loaded machine alone makes a request wait.
	stop := make(chan struct{})
	far := time.Now().Add(time.Minute)
	loadDone, freeDone := make(chan []shot), make(chan []shot)
	go func() { loadDone <- pace(t, ins, "/fixed", 2*limit/w.Seconds(), skewShare, far, stop) }()
	go func() { freeDone <- pace(t, ins, "/free", 30, []int{1, 1, 1}, far, stop) }()

	time.Sleep(1500 * time.Millisecond)
	granted := make([]float64, n)
	for i, in := range ins {
		if granted[i] = leaseMetric(t, in, "sluice_ratelimit_lease_requests_total", "fixed", "granted"); granted[i] == 0 {
			t.Errorf("instance %d: no lease granted before Redis went down", i)
		}
	}
	rs.Kill()
	killed := time.Now()
	waitAll(t, ins, 5*time.Second, "the fallback gauge going to 1", func(in *instance) bool {
		return leaseMetric(t, in, "sluice_ratelimit_lease_fallback", "fixed", "") == 1
	})
	for i, in := range ins {
		l, ok := in.WaitLog(5*time.Second, `"msg":"lease fallback"`, `"policy":"fixed"`)
		if !ok {
			t.Errorf("instance %d: no \"lease fallback\" log line", i)
			continue
		}
		if !strings.Contains(l, fmt.Sprintf(`"instances":%d`, n)) || !strings.Contains(l, fmt.Sprintf(`"limit":%d`, limit/n)) {
			t.Errorf("instance %d: %s, want instances %d and limit %d", i, l, n, limit/n)
		}
	}
	// Two whole windows without Redis.
	firstDown := windowOf(killed, w) + 1
	time.Sleep(time.Until(windowStart(firstDown+2, w).Add(50 * time.Millisecond)))
	restarted := time.Now()
	rs.Restart()
	for i, in := range ins {
		granted[i] = leaseMetric(t, in, "sluice_ratelimit_lease_requests_total", "fixed", "granted")
	}
	resumed := waitAll(t, ins, 10*time.Second, "leasing again after Redis came back", func(in *instance) bool {
		return leaseMetric(t, in, "sluice_ratelimit_lease_fallback", "fixed", "") == 0
	})
	for i, in := range ins {
		if g := leaseMetric(t, in, "sluice_ratelimit_lease_requests_total", "fixed", "granted"); g <= granted[i] {
			t.Errorf("instance %d: granted leases %v after Redis came back, %v before: want more", i, g, granted[i])
		}
		if _, ok := in.WaitLog(0, `"msg":"lease resumed"`, `"policy":"fixed"`); !ok {
			t.Errorf("instance %d: no \"lease resumed\" log line", i)
		}
	}
	// One whole window with every instance on leases again.
	firstBack := windowOf(resumed, w) + 1
	time.Sleep(time.Until(windowStart(firstBack+1, w).Add(50 * time.Millisecond)))
	close(stop)
	shots, free := <-loadDone, <-freeDone

	var slowestFree time.Duration
	for _, s := range free {
		slowestFree = max(slowestFree, s.end.Sub(s.start))
	}
	checkAnswers(t, free, 10*time.Second)
	// A decision waits at most the store's timeout for Redis (twice: a
	// refill in flight, then its own call), 50ms here.
	ok, rejected := checkAnswers(t, shots, 10*time.Second)
	checkSlowest(t, shots, free, 500*time.Millisecond)
	t.Logf("%d requests: %d admitted, %d rejected; Redis down from %s to %s, all leasing again at %s; slowest without a limit %s",
		len(shots), ok, rejected, killed.Format("15:04:05.000"), restarted.Format("15:04:05.000"), resumed.Format("15:04:05.000"), slowestFree)
	adm := admissions(t, up, "/fixed", shots)

	// While Redis is down each instance admits at most limit/N per window
	// on its own.
	downFrom, downTo := windowStart(firstDown, w), windowStart(firstDown+2, w)
	for i := range ins {
		var mine []admission
		for _, a := range adm {
			if a.inst == i && !a.lo.Before(downFrom) && a.hi.Before(downTo) {
				mine = append(mine, a)
			}
		}
		var counts []int
		for k := firstDown; k < firstDown+2; k++ {
			_, least := windowCounts(mine, w, k)
			counts = append(counts, least)
		}
		t.Logf("instance %d admitted %v in the windows without Redis", i, counts)
		if i == 0 && len(mine) == 0 {
			t.Errorf("instance 0 admitted nothing while Redis was down, want up to %d per window", limit/n)
		}
		checkPerWindow(t, mine, w, limit/n)
	}
	// Back on leases, the instances share one budget again.
	var back []admission
	for _, a := range adm {
		if !a.lo.Before(windowStart(firstBack, w)) {
			back = append(back, a)
		}
	}
	if len(back) == 0 {
		t.Errorf("nothing admitted after every instance leased again")
	}
	// Exactness holds while the instances lease: a round trip slower
	// than the 50ms timeout on a loaded machine sends an instance back
	// to limit/N, and says so in a second line.
	for i, in := range ins {
		if n := countLines(in, `"msg":"lease fallback"`); n > 1 {
			t.Logf("instance %d fell back %d times (a round trip over the timeout): not checking the shared budget after Redis came back", i, n)
			return
		}
	}
	checkPerWindow(t, back, w, limit)
}

// countLines counts the instance's log lines containing sub.
func countLines(in *instance, sub string) int {
	n := 0
	for _, l := range in.logs.Lines() {
		if strings.Contains(l, sub) {
			n++
		}
	}
	return n
}

// leaseCount reads the count Redis holds for a fixed_window lease policy:
// every unit granted in the current window and not given back.
func leaseCount(t *testing.T, rs *redistest.Server, policy string) int {
	t.Helper()
	keys := strings.Fields(rs.Do("KEYS", "sluice:{"+policy+"|*"))
	if len(keys) != 1 {
		t.Fatalf("redis keys of policy %s: got %q, want one", policy, keys)
	}
	v := strings.Fields(rs.Do("GET", keys[0]))
	if len(v) != 2 {
		t.Fatalf("redis %s: got %q, want 'start count'", keys[0], v)
	}
	var n int
	if _, err := fmt.Sscan(v[1], &n); err != nil {
		t.Fatalf("redis %s: count %q: %v", keys[0], v[1], err)
	}
	return n
}

// awayFromHourEnd waits, if need be, until a 1h window has at least a
// minute left, so that a test counting one window's budget stays in it.
func awayFromHourEnd(t *testing.T) {
	if left := time.Until(windowStart(windowOf(time.Now(), time.Hour)+1, time.Hour)); left < time.Minute {
		t.Logf("waiting %s for the next hour's window", left)
		time.Sleep(left + 10*time.Millisecond)
	}
}

// TestLeaseReturnedOnSIGTERM stops an instance that holds unspent lease
// units: it gives them back before it exits, so Redis counts exactly what
// was admitted and another instance can spend the rest of the budget.
func TestLeaseReturnedOnSIGTERM(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	up := newUpstream(t)
	const limit = 2000
	cfg := leaseConfig(rs.Addr(), up.URL, "timeout: 1s",
		"warm: {algorithm: fixed_window, limit: 1000, window: 1h, key: [global], sync: lease}",
		fmt.Sprintf("term: {algorithm: fixed_window, limit: %d, window: 1h, key: [global], sync: lease}", limit),
	)
	path := writeConfig(t, cfg)
	a, b := start(t, path), start(t, path)
	warmUp(t, []*instance{a, b})
	awayFromHourEnd(t)
	admittedBy := func() int {
		n := 0
		for _, r := range up.Requests() {
			if r.Path == "/term" {
				n++
			}
		}
		return n
	}
	// A steady stream makes a hold a batch; right after its last answer
	// (well before an idle lease goes back on its own) Redis counts what
	// a admitted plus what it holds. A loaded machine may stall long
	// enough for the idle sweep to give the units back first: then try
	// again.
	held, admitted := 0, 0
	for attempt := 1; held == 0; attempt++ {
		if attempt > 3 {
			t.Fatalf("a held no units right after its load, %d times", attempt-1)
		}
		shots := pace(t, []*instance{a}, "/term", 200, []int{1}, time.Now().Add(1500*time.Millisecond), nil)
		c := leaseCount(t, rs, "term")
		admitted = admittedBy()
		if held = c - admitted; held > 0 {
			a.Signal(syscall.SIGTERM)
		}
		checkAnswers(t, shots, 5*time.Second)
		t.Logf("attempt %d: Redis counts %d, %d admitted: a holds %d", attempt, c, admitted, held)
	}
	select {
	case <-a.exited:
	case <-time.After(20 * time.Second):
		t.Fatal("a did not exit within 20s of SIGTERM")
	}
	if a.err != nil {
		t.Errorf("a exited with %v, want status 0", a.err)
	}
	if c := leaseCount(t, rs, "term"); c != admitted {
		t.Errorf("after a exited Redis counts %d, want the %d it admitted (its %d unspent units given back)", c, admitted, held)
	}
	// b can spend all the rest, and not one more.
	codes := map[int]int{}
	for range limit - admitted + 50 {
		resp, _ := do(t, nil, "GET", b.HTTP+"/term", nil, nil)
		codes[resp.StatusCode]++
	}
	if codes[200] != limit-admitted || codes[429] != 50 {
		t.Errorf("b after a left: got %v, want %d 200s (the rest of %d) and 50 429s", codes, limit-admitted, limit)
	}
}

// drain sends requests to the instances in turn until each has answered
// 429 twice in a row (its lease empty and Redis out of budget, so no
// instance holds units the others cannot have) and returns how many were
// admitted. It gives up after max requests.
func drain(t *testing.T, ins []*instance, path string, max int) int {
	t.Helper()
	admitted, run := 0, 0
	for i := 0; run < 2*len(ins); i++ {
		if i == max {
			t.Fatalf("%s: still admitting after %d requests", path, max)
		}
		resp, _ := do(t, nil, "GET", ins[i%len(ins)].HTTP+path, nil, nil)
		switch resp.StatusCode {
		case 200:
			admitted++
			run = 0
		case 429:
			run++
		default:
			t.Fatalf("%s: got %d, want 200 or 429", path, resp.StatusCode)
		}
	}
	return admitted
}

// TestLeaseReloadStartsAfresh reloads two instances with a changed lease
// policy: its budget starts over at the new limit, exactly, rather than
// carrying the old count or the old leases.
func TestLeaseReloadStartsAfresh(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	up := newUpstream(t)
	cfg := func(limit int) string {
		return leaseConfig(rs.Addr(), up.URL, "timeout: 1s",
			fmt.Sprintf("reload: {algorithm: fixed_window, limit: %d, window: 1h, key: [global], sync: lease}", limit))
	}
	path := writeConfig(t, cfg(50))
	ins := []*instance{start(t, path), start(t, path)}
	awayFromHourEnd(t)
	if got := drain(t, ins, "/reload", 500); got != 50 {
		t.Fatalf("before the reload: %d admitted, want exactly 50", got)
	}
	if err := os.WriteFile(path, []byte(cfg(60)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, in := range ins {
		in.Signal(syscall.SIGHUP)
		waitMetric(t, in.Admin, `sluice_config_reloads_total{result="success"}`, 1)
	}
	if got := drain(t, ins, "/reload", 500); got != 60 {
		t.Errorf("after the reload to limit 60: %d admitted, want exactly 60 (a fresh budget)", got)
	}
	// An unchanged policy keeps its count across a reload.
	for _, in := range ins {
		in.Signal(syscall.SIGHUP)
		waitMetric(t, in.Admin, `sluice_config_reloads_total{result="success"}`, 2)
	}
	if got := drain(t, ins, "/reload", 500); got != 0 {
		t.Errorf("after an unchanged reload: %d admitted, want 0 (the window's 60 are spent)", got)
	}
}

// TestLeaseBurstOnFreshLease sends a burst of concurrent requests to a
// lease nobody has used yet, on a budget they cannot exhaust: while the
// instance's batch size is still small, requests wait for refills rather
// than being rejected.
func TestLeaseBurstOnFreshLease(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	up := newUpstream(t)
	cfg := leaseConfig(rs.Addr(), up.URL, "timeout: 1s",
		"huge: {algorithm: token_bucket, limit: 1000000, window: 1s, burst: 1000000, key: [global], sync: lease}",
		"huge2: {algorithm: fixed_window, limit: 1000000, window: 1h, key: [global], sync: lease}")
	in := start(t, writeConfig(t, cfg))
	for _, path := range []string{"/huge", "/huge2"} {
		if codes := spread(t, []*instance{in}, path, 200); codes[200] != 200 {
			t.Errorf("%s: 200 concurrent requests on a fresh lease of a budget of a million: got %v, want 200 200s", path, codes)
		}
	}
}

// TestLeaseSteadyModestTrafficCost holds the cost promise where each
// instance sees only 20 requests a second, far below the budget: Redis
// calls, heartbeats included and counted by Redis itself, stay at most a
// fifth of the requests once the traffic is steady.
func TestLeaseSteadyModestTrafficCost(t *testing.T) {
	rs := redistest.Start(t)
	up := newUpstream(t)
	cfg := leaseConfig(rs.Addr(), up.URL, "timeout: 1s",
		"warm: {algorithm: fixed_window, limit: 1000, window: 1h, key: [global], sync: lease}",
		"fixed: {algorithm: fixed_window, limit: 100000, window: 1h, key: [global], sync: lease}",
		"bucket: {algorithm: token_bucket, limit: 100000, window: 1h, key: [global], sync: lease}",
	)
	path := writeConfig(t, cfg)
	ins := []*instance{start(t, path), start(t, path)}
	warmUp(t, ins)
	for _, route := range []string{"/fixed", "/bucket"} {
		t.Run(route, func(t *testing.T) {
			// Two seconds let the instances learn their rate; the next
			// three are counted.
			steadyFrom := time.Now().Add(2 * time.Second)
			steadyTo := steadyFrom.Add(3 * time.Second)
			done := make(chan []shot)
			go func() { done <- pace(t, ins, route, 40, []int{1, 1}, steadyTo.Add(100*time.Millisecond), nil) }()
			time.Sleep(time.Until(steadyFrom))
			_, by0 := commandCalls(t, rs)
			at0 := time.Now()
			time.Sleep(time.Until(steadyTo))
			at1 := time.Now()
			_, by1 := commandCalls(t, rs)
			shots := <-done
			noFallback(t, ins)
			p := phase{shots: shots, commands: callsDelta(by0, by1)}
			p.calls = roundTrips(t, p.commands)
			for _, s := range shots {
				if s.code != 200 {
					t.Fatalf("request to %s: got %d (%v), want 200 far below the limit", route, s.code, s.err)
				}
				if !s.start.Before(at0) && s.start.Before(at1) {
					p.requests++
				}
			}
			t.Logf("Redis calls %d for %d requests (%v)", p.calls, p.requests, p.commands)
			p.checkCost(t)
		})
	}
}
