package redisstore

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// floodKeys decides one request for each of up to max fresh keys of p
// (key values "flood-N", as an attacker picks them: one new X-API-Key, or
// username, per request) from 16 goroutines, until stop reports true.
// It returns how many it sent.
func floodKeys(t *testing.T, s *Store, p *ratelimit.Policy, max int64, stop func() bool) int64 {
	t.Helper()
	var next atomic.Int64
	var done atomic.Bool
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			out := make([]ratelimit.Decision, 1)
			for !done.Load() {
				i := next.Add(1)
				if i > max {
					return
				}
				r := ratelimit.Request{Policy: p, Key: "flood-" + strconv.FormatInt(i, 10)}
				if err := s.Decide(context.Background(), time.Now(), []ratelimit.Request{r}, out); err != nil {
					t.Error(err)
					return
				}
				if i%2000 == 0 && stop() {
					done.Store(true)
				}
			}
		})
	}
	wg.Wait()
	return min(next.Load(), max)
}

// floodTimeout is the Timeout of the stores the floods fill: a round trip
// that outlasts it is decided by the fallback, whose fresh bucket admits
// a spent key, and a loaded machine must not pass for that. Only Redis
// answering OOM is what the tests are about.
const floodTimeout = 10 * time.Second

// oomSeen is an Options.Observe that notes whether Redis answered OOM.
type oomSeen struct{ atomic.Bool }

func (o *oomSeen) observe(_ time.Duration, err error) {
	if isOOMReply(err) {
		o.Store(true)
	}
}

// TestKeyFloodOOMKeepsBreakerClosed: a flood of fresh key values against
// a Redis with maxmemory and noeviction (the setting that keeps live
// buckets) fills it, and every script that writes fails with OOM. Were
// those errors taken for Redis failing, the breaker would open for every
// key, and on_error local (the default) would decide every bucket afresh
// in the in-process fallback: a key exhausted in Redis would get its
// whole limit again, on each instance. Redis still decides what writes
// nothing, the rejections of spent buckets among them.
func TestKeyFloodOOMKeepsBreakerClosed(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
	var full oomSeen
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: floodTimeout, Observe: full.observe})
	// A sliding log, not a window aligned to the clock: a window that
	// turned during the test would make the spent key fresh.
	p := ratelimit.MustPolicy(ratelimit.Policy{Name: "otp", Algorithm: ratelimit.SlidingWindowLog, Limit: 3, Window: time.Hour})
	flood := ratelimit.MustPolicy(ratelimit.Policy{Name: "api", Algorithm: ratelimit.FixedWindow, Limit: 3, Window: time.Hour})
	victim := ratelimit.Request{Policy: p, Key: "exhausted-key"}
	out := make([]ratelimit.Decision, 1)
	for i := range 4 {
		if err := s.Decide(context.Background(), time.Now(), []ratelimit.Request{victim}, out); err != nil {
			t.Fatal(err)
		}
		if want := i < 3; out[0].Allowed != want {
			t.Fatalf("request %d: allowed %v, want %v", i+1, out[0].Allowed, want)
		}
	}
	n := floodKeys(t, s, flood, 400_000, full.Load)
	t.Logf("flooded %d fresh keys; healthy=%v last error: %v", n, s.Healthy(), s.LastError())
	if !full.Load() {
		t.Fatalf("flooded %d fresh keys: Redis never answered OOM, want it full", n)
	}
	admitted := admittedOf(t, s, victim, 3)
	if admitted > 0 {
		t.Errorf("after the key flood, %d more requests of a key whose window (limit 3) is spent were admitted (fallback: %v)", admitted, fmt.Sprint(s.LastError()))
	}
}

// TestWarnsWhenRedisEvicts: a Redis that evicts keys once full gets a
// warning at connect; one with noeviction (Redis's default) none.
func TestWarnsWhenRedisEvicts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		warn bool
	}{
		{[]string{"--maxmemory-policy", "volatile-lru"}, true},
		{nil, false},
	} {
		srv := redistest.Start(t, tc.args...)
		var buf syncBuffer
		newStore(t, Options{Addresses: []string{srv.Addr()}, Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
		const want = `"maxmemory_policy":"volatile-lru"`
		if tc.warn {
			if _, ok := waitFor(5*time.Second, func() bool { return buf.count(want) > 0 }); !ok {
				t.Errorf("%v: no warning naming %s", tc.args, want)
			}
		} else if time.Sleep(200 * time.Millisecond); buf.count("evicts") > 0 {
			t.Errorf("noeviction: got a warning, want none")
		}
	}
}

// admittedOf decides n requests of r now, one at a time, and returns how
// many were admitted.
func admittedOf(t *testing.T, s *Store, r ratelimit.Request, n int) int {
	t.Helper()
	out := make([]ratelimit.Decision, 1)
	admitted := 0
	for range n {
		if err := s.Decide(context.Background(), time.Now(), []ratelimit.Request{r}, out); err != nil {
			t.Fatal(err)
		}
		if out[0].Allowed {
			admitted++
		}
	}
	return admitted
}
