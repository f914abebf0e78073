package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// boundaryRun is the setting of the tests of units spent across a window's
// end: two instances sharing one Redis, heartbeats counted, and a
// fixed_window window of its own, entered early.
type boundaryRun struct {
	srv      *redistest.Server
	a, b     *Store // a is closed by the test, b by the cleanup
	startK   int64  // window k's start, Unix µs
	boundary time.Time
	window   time.Duration
}

// startBoundaryRun starts the two instances and waits for the start of a
// window of window, early in it (windows are aligned to the Unix epoch,
// and Redis runs on this machine's clock).
func startBoundaryRun(t *testing.T, window time.Duration) *boundaryRun {
	t.Helper()
	srv := redistest.Start(t)
	mk := func() *Store {
		s, err := New(context.Background(), Options{Addresses: []string{srv.Addr()}, Timeout: 3 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := waitFor(10*time.Second, s.Healthy); !ok {
			t.Fatal("store not healthy")
		}
		return s
	}
	r := &boundaryRun{srv: srv, a: mk(), b: mk(), window: window}
	t.Cleanup(func() { r.b.Close() })
	for _, s := range []*Store{r.a, r.b} {
		s.startHeartbeat()
		s.beat(false)
	}
	w := int64(window / time.Microsecond)
	for {
		if off := time.Now().UnixMicro() % w; off > 100_000 && off < 300_000 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.startK = time.Now().UnixMicro() / w * w
	r.boundary = time.UnixMicro(r.startK + w)
	return r
}

// fillUntilBoundary has instance a decide rp 3000 times, then steadily,
// which keeps its lease (idle leases go back after 400ms), until 40ms
// before window k ends.
func (r *boundaryRun) fillUntilBoundary(t *testing.T, rp ratelimit.Request) {
	t.Helper()
	out := make([]ratelimit.Decision, 1)
	for i := 0; i < 3000 || time.Until(r.boundary) > 40*time.Millisecond; i++ {
		if err := r.a.Decide(context.Background(), time.Now(), []ratelimit.Request{rp}, out); err != nil {
			t.Fatal(err)
		}
		if i >= 3000 {
			time.Sleep(2 * time.Millisecond)
		}
	}
}

// drainB closes instance a (its unspent units of window k+1 go back) and
// returns what instance b could still admit of rp in window k+1: what
// Redis has left of it, since b holds no lease of rp and each grant it
// asked for would be min(want, limit - count). One look, rather than b
// spending that budget decision by decision, so that a loaded machine
// cannot end window k+1 halfway through the count (10,000 decisions
// under the race detector took more than the window there). The look
// says when its window ends: one made in a later window than k+1 (a
// stall of a whole window) proves nothing, and fails.
func (r *boundaryRun) drainB(t *testing.T, rp ratelimit.Request) int64 {
	t.Helper()
	r.a.Close()
	c := r.b.client.Load()
	if c == nil {
		t.Fatal("instance b has no client")
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.b.o.Timeout)
	defer cancel()
	before := time.Now()
	d, err := r.b.peekLease(ctx, *c, before, rp)
	if err != nil {
		t.Fatalf("looking at window k+1 from b: %v", err)
	}
	// The look's window ends at before + Reset, give or take the round
	// trip: window k+1's end, not k+2's a window later.
	end := r.boundary.Add(r.window)
	if got := before.Add(d.Reset); got.After(end.Add(r.window / 2)) {
		t.Fatalf("b looked at a window ending at %v, want window k+1, ending at %v", got, end)
	}
	return d.Remaining
}
