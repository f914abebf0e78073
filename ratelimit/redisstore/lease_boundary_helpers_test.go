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
// has instance b take what Redis has left of window k+1 for rp, returning
// how many b admitted.
func (r *boundaryRun) drainB(t *testing.T, rp ratelimit.Request) int64 {
	t.Helper()
	r.a.Close()
	out := make([]ratelimit.Decision, 1)
	var admitted int64
	for misses := 0; misses < 50 && time.Now().Before(r.boundary.Add(r.window-200*time.Millisecond)); {
		if err := r.b.Decide(context.Background(), time.Now(), []ratelimit.Request{rp}, out); err != nil {
			t.Fatal(err)
		}
		if out[0].Allowed {
			admitted++
		} else {
			misses++
		}
	}
	if time.Now().After(r.boundary.Add(r.window)) {
		t.Fatalf("draining ran past window k+1")
	}
	return admitted
}
