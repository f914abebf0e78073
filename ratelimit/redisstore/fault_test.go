package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// trips counts Observe calls.
type trips struct{ ok, failed atomic.Int64 }

func (c *trips) observe(_ time.Duration, err error) {
	if err != nil {
		c.failed.Add(1)
	} else {
		c.ok.Add(1)
	}
}

const faultTimeout = 50 * time.Millisecond

// slack is what a decision may take beyond Timeout on a loaded CI machine
// (beyond its deadline's wake-up where a test measures that): two
// goroutines woken by deadlines of one length can run 200ms apart there.
// It stays well under the second that a call held by rueidis takes (a
// dial or handshake to a hung server, ConnWriteTimeout), which is what
// the bounds catch.
const slack = 400 * time.Millisecond

func decideTimed(t *testing.T, s *Store, reqs []ratelimit.Request) ([]ratelimit.Decision, time.Duration) {
	t.Helper()
	out := make([]ratelimit.Decision, len(reqs))
	start := time.Now()
	if err := s.Decide(context.Background(), time.Now(), reqs, out); err != nil {
		t.Fatalf("Decide: got error %v, want none (on_error handles it)", err)
	}
	return out, time.Since(start)
}

// decideWithin is decideTimed that fails the test when the decision took
// longer than the Timeout plus slack and, on a machine loaded enough that
// a timer of the Timeout woke later than that, longer than that timer's
// wake-up plus slack: what the decision may take is bounded by the delay
// that actually occurred, not by a guess at the machine's load.
func decideWithin(t *testing.T, s *Store, reqs []ratelimit.Request, what string) []ratelimit.Decision {
	t.Helper()
	woke := deadlineProbe()
	d, took := decideTimed(t, s, reqs)
	if took > faultTimeout+slack && took > woke()+slack {
		t.Errorf("%s took %v, want <= %v (a timer of the Timeout woke after %v)", what, took, max(faultTimeout, woke())+slack, woke())
	}
	return d
}

// deadlineProbe starts a deadline of faultTimeout, as a decision's
// context has, and returns a function that reports how long after the
// call a goroutine waiting on it was woken: the Timeout plus the
// scheduling delay the machine added just then. The deadline takes the
// same path a decision's does (the context's timer, its cancel, then the
// wake-up of the goroutine in select), which a loaded machine can hold up
// longer than a bare timer's.
func deadlineProbe() func() time.Duration {
	start := time.Now()
	woke := make(chan time.Duration, 1)
	ctx, cancel := context.WithTimeout(context.Background(), faultTimeout)
	go func() {
		defer cancel()
		<-ctx.Done()
		woke <- time.Since(start)
	}()
	var once sync.Once
	var d time.Duration
	return func() time.Duration {
		once.Do(func() { d = <-woke })
		return d
	}
}

// waitFor polls cond every 10ms for up to d and reports how long it took.
func waitFor(d time.Duration, cond func() bool) (time.Duration, bool) {
	start := time.Now()
	for time.Since(start) < d {
		if cond() {
			return time.Since(start), true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start), cond()
}

// TestFaultKilledAndRestarted kills Redis mid-run: decisions fall back to
// the local store at once, the breaker stops trying after three failures,
// and once Redis is back decisions are shared again within 2s.
func TestFaultKilledAndRestarted(t *testing.T) {
	srv := redistest.Start(t)
	var c trips
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: faultTimeout, Observe: c.observe})
	p := policyOf(t, "fault-kill", ratelimit.FixedWindow, 1000, time.Hour)
	reqs := []ratelimit.Request{{Policy: p, Key: "k"}}
	for range 5 {
		if d, _ := decideTimed(t, s, reqs); !d[0].Allowed {
			t.Fatal("healthy: got rejected, want allowed")
		}
	}
	if !s.Healthy() {
		t.Fatalf("got unhealthy before the kill: %v", s.LastError())
	}

	srv.Kill()
	for i := range 100 {
		d := decideWithin(t, s, reqs, fmt.Sprintf("decision %d with redis down", i))
		if !d[0].Allowed {
			t.Errorf("decision %d with redis down: got %+v, want allowed by the local fallback", i, d[0])
		}
	}
	if s.Healthy() {
		t.Error("redis down: got healthy, want unhealthy")
	}
	// Three failures open the breaker; the prober may add a ping.
	if got := c.failed.Load(); got < breakerFailures || got > breakerFailures+1 {
		t.Errorf("redis down, 100 decisions: got %d failed round trips, want %d (breaker open)", got, breakerFailures)
	}
	if s.LastError() == nil {
		t.Error("LastError: got nil, want the failure")
	}

	srv.Restart()
	took, ok := waitFor(3*time.Second, func() bool {
		before := c.ok.Load()
		decideTimed(t, s, reqs)
		return c.ok.Load() > before && s.Healthy()
	})
	if !ok || took > 2*time.Second {
		t.Fatalf("redis back: shared decisions after %v (ok %v), want within 2s", took, ok)
	}
	t.Logf("redis back: shared decisions after %v", took)
	if got := srv.Do("EXISTS", Key(s.prefix, reqs[0])); got != "1" {
		t.Errorf("redis back: bucket key exists %s, want 1", got)
	}
}

// TestFaultHungServer pauses Redis: no decision waits past the timeout and
// the breaker opens.
func TestFaultHungServer(t *testing.T) {
	srv := redistest.Start(t)
	var c trips
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: faultTimeout, Observe: c.observe})
	reqs := []ratelimit.Request{{Policy: policyOf(t, "fault-hang", ratelimit.TokenBucket, 10, time.Second), Key: "k"}}
	// Until a decision is answered and no failure is counted: the first
	// loads the script, two round trips within the Timeout, which a
	// loaded machine can miss, and a failure would count towards the
	// breaker below.
	if _, ok := waitFor(10*time.Second, func() bool {
		decideTimed(t, s, reqs)
		return s.br.failures.Load() == 0 && s.Healthy() && !s.br.open.Load()
	}); !ok {
		t.Fatalf("no decision answered by redis in 10s: %v", s.LastError())
	}
	failedBefore := c.failed.Load()
	srv.Pause()
	defer srv.Resume()
	for range 20 {
		// A loaded machine wakes the decision late from its deadline: the
		// probe's timer, of the same length, measures by how much, so the
		// bound holds the Timeout plus the delay that actually occurred.
		// (Only a slow decision waits for the probe, so that the loop
		// stays as short as the decisions.)
		woke := deadlineProbe()
		if _, took := decideTimed(t, s, reqs); took > faultTimeout+slack && took > woke()+slack {
			t.Errorf("decision with a hung redis took %v, want <= %v (a timer of the Timeout woke after %v)", took, woke()+slack, woke())
		}
	}
	if got := c.failed.Load() - failedBefore; got < breakerFailures || got > breakerFailures+1 {
		t.Errorf("hung redis, 20 decisions: got %d failed round trips, want %d", got, breakerFailures)
	}
	if s.Healthy() {
		t.Error("hung redis: got healthy, want unhealthy")
	}
	srv.Resume()
	if took, ok := waitFor(3*time.Second, s.Healthy); !ok || took > 2*time.Second {
		t.Errorf("resumed: healthy after %v (ok %v), want within 2s", took, ok)
	}
}

// TestFaultOnError checks allow, deny and local against a Redis that is
// not there at all, from the start.
func TestFaultOnError(t *testing.T) {
	srv := redistest.Start(t)
	addr := srv.Addr()
	srv.Kill()
	p := policyOf(t, "fault-mode", ratelimit.TokenBucket, 10, time.Second)
	reqs := []ratelimit.Request{{Policy: p, Key: "k"}}
	for _, tc := range []struct {
		mode string
		want ratelimit.Decision
	}{
		{OnErrorAllow, ratelimit.Decision{Allowed: true, Limit: 10, Remaining: 9}},
		{OnErrorDeny, ratelimit.Decision{Limit: 10, RetryAfter: time.Second, Reset: time.Second}},
		{OnErrorLocal, ratelimit.Decision{Allowed: true, Limit: 10, Remaining: 9, RetryAfter: 100 * time.Millisecond, Reset: 100 * time.Millisecond}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			s, err := New(context.Background(), Options{Addresses: []string{addr}, Timeout: faultTimeout, OnError: tc.mode})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if s.Healthy() {
				t.Error("unreachable from the start: got healthy, want unhealthy")
			}
			d := decideWithin(t, s, reqs, "decision")
			// The fallback's ticket is its own, checked by the refund test.
			got := d[0]
			got.Ticket = ratelimit.Ticket{}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", d[0], tc.want)
			}
			_, err = s.Peek(context.Background(), time.Now(), reqs[0])
			if tc.mode == OnErrorLocal {
				if err != nil {
					t.Errorf("Peek: got %v, want the fallback's answer", err)
				}
			} else if !errors.Is(err, ErrUnavailable) {
				t.Errorf("Peek: got %v, want ErrUnavailable", err)
			}
		})
	}
}

func TestOptionsInvalid(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
	}{
		{"no addresses", Options{}},
		{"mode", Options{Addresses: []string{"127.0.0.1:1"}, Mode: "ring"}},
		{"sentinel without master", Options{Addresses: []string{"127.0.0.1:1"}, Mode: Sentinel}},
		{"on_error", Options{Addresses: []string{"127.0.0.1:1"}, OnError: "panic"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if s, err := New(context.Background(), tc.o); err == nil {
				s.Close()
				t.Errorf("got nil error, want one")
			}
		})
	}
}

// TestFallbackTakesOverTheQueue queues requests on Redis, kills it, and
// decides the next on the local fallback: it must leave one interval after
// the last Redis scheduled, not at once beside the requests still
// leaving, which would double the bucket's outflow.
func TestFallbackTakesOverTheQueue(t *testing.T) {
	srv := redistest.Start(t)
	fallback := ratelimit.NewMemoryStore(ratelimit.MemoryOptions{SweepInterval: -1})
	defer fallback.Close()
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: testTimeout, Fallback: fallback})
	// An interval no pause of a loaded machine outlasts: Redis decides
	// on its own clock, and requests further apart than the interval
	// would not queue at all.
	const interval = time.Minute
	p := ratelimit.MustPolicy(ratelimit.Policy{Name: "handover", Algorithm: ratelimit.LeakyBucket, Limit: 10, Window: 10 * time.Minute, Queue: 5})
	reqs := []ratelimit.Request{{Policy: p, Key: "k"}}
	var last ratelimit.Decision
	for i := range 3 {
		d, _ := decideTimed(t, s, reqs)
		if !d[0].Allowed || (i > 0) != (d[0].Delay > 0) {
			t.Fatalf("request %d on Redis: got %+v, want admitted, queued after the first", i+1, d[0])
		}
		last = d[0]
	}
	srv.Kill()
	d, _ := decideTimed(t, s, reqs)
	if s.Healthy() {
		t.Fatal("Redis killed: got healthy, want the fallback deciding")
	}
	if !d[0].Allowed {
		t.Fatalf("request 4 on the fallback: got rejected (%+v), want queued behind Redis's", d[0])
	}
	// Compared on the wall clock: the fallback's schedule is kept in Unix
	// ns, and time.Now's monotonic reading drifts from it by fractions of
	// a microsecond.
	if want := last.Departure.Add(interval).Round(0); d[0].Delay == 0 || d[0].Departure.Round(0).Before(want) {
		t.Errorf("request 4 on the fallback: got Delay %v, departure %v; want to leave at or after %v, one interval after the last Redis scheduled",
			d[0].Delay, d[0].Departure.Format(time.StampMicro), want.Format(time.StampMicro))
	}
}

// TestRedisTakesTheQueueBack queues requests on the local fallback while
// Redis is away, brings Redis back and decides on it again: the first
// request Redis schedules must leave one interval after the last the
// fallback queued, not beside the fallback's requests still leaving.
func TestRedisTakesTheQueueBack(t *testing.T) {
	srv := redistest.Start(t)
	fallback := ratelimit.NewMemoryStore(ratelimit.MemoryOptions{SweepInterval: -1})
	defer fallback.Close()
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: testTimeout, Fallback: fallback})
	// As in TestFallbackTakesOverTheQueue, requests a loaded machine
	// sends further apart than the interval would not queue.
	const interval = time.Minute
	p := ratelimit.MustPolicy(ratelimit.Policy{Name: "handback", Algorithm: ratelimit.LeakyBucket, Limit: 5, Window: 5 * time.Minute, Queue: 10})
	reqs := []ratelimit.Request{{Policy: p, Key: "k"}}
	srv.Kill()
	var last ratelimit.Decision
	for i := range 4 {
		d, _ := decideTimed(t, s, reqs)
		if !d[0].Allowed {
			t.Fatalf("request %d on the fallback: got rejected (%+v), want queued", i+1, d[0])
		}
		last = d[0]
	}
	if s.Healthy() {
		t.Fatal("Redis killed: got healthy, want the fallback deciding")
	}
	srv.Restart()
	if _, ok := waitFor(3*time.Second, func() bool { return s.Healthy() && !s.br.open.Load() }); !ok {
		t.Fatalf("Redis back for 3s: still unhealthy: %v", s.LastError())
	}
	d, _ := decideTimed(t, s, reqs)
	if srv.Do("EXISTS", Key(s.prefix, reqs[0])) != "1" {
		t.Fatal("first request back: not decided on Redis")
	}
	if !d[0].Allowed {
		t.Fatalf("first request back on Redis: got rejected (%+v), want queued behind the fallback's", d[0])
	}
	if want := last.Departure.Add(interval).Round(0); d[0].Delay == 0 || d[0].Departure.Round(0).Before(want) {
		t.Errorf("first request back on Redis: got Delay %v, departure %v; want to leave at or after %v, one interval after the last the fallback queued",
			d[0].Delay, d[0].Departure.Format(time.StampMicro), want.Format(time.StampMicro))
	}
}

// TestFaultHungServerAdminCalls pauses Redis under a Reset and a give-back:
// like decisions, they return within the Timeout, so an admin DELETE or a
// request that stops waiting in the queue is never held by a hung server.
func TestFaultHungServerAdminCalls(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: faultTimeout})
	bucket := ratelimit.Request{Policy: policyOf(t, "fault-hang-reset", ratelimit.TokenBucket, 10, time.Second), Key: "k"}
	queue := ratelimit.Request{Policy: ratelimit.MustPolicy(ratelimit.Policy{Name: "fault-hang-queue", Algorithm: ratelimit.LeakyBucket, Limit: 1, Window: time.Second, Queue: 10}), Key: "k"}
	out, _ := decideTimed(t, s, []ratelimit.Request{bucket, queue})
	out, _ = decideTimed(t, s, []ratelimit.Request{queue})
	if out[0].Delay == 0 {
		t.Fatalf("second request on the queue: got %+v, want a delay", out[0])
	}
	srv.Pause()
	defer srv.Resume()
	// One failed decision makes rueidis drop its connection, so the next
	// call must dial, and a dial to a hung server is where a call could
	// outlast its context.
	decideTimed(t, s, []ratelimit.Request{bucket})

	woke := deadlineProbe()
	start := time.Now()
	err := s.Reset(context.Background(), bucket)
	if took := time.Since(start); took > faultTimeout+slack && took > woke()+slack {
		t.Errorf("Reset with a hung redis took %v, want <= %v", took, woke()+slack)
	}
	if err == nil {
		t.Error("Reset with a hung redis: got nil, want an error")
	}

	decideTimed(t, s, []ratelimit.Request{bucket})
	woke = deadlineProbe()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start = time.Now()
	s.Wait(ctx, queue, out[0])
	if took := time.Since(start); took > faultTimeout+slack && took > woke()+slack {
		t.Errorf("giving up a queue place with a hung redis took %v, want <= %v", took, woke()+slack)
	}
}
