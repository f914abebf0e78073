package proxy

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
)

// steppedClock plays a machine's two clocks: a wall clock that can be
// stepped (by NTP, or by hand) and a monotonic one that only goes on.
type steppedClock struct {
	mu   sync.Mutex
	t0   time.Time
	mono time.Duration // time gone by
	step time.Duration // how far the wall clock was set off
}

func (c *steppedClock) wall() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t0.Add(c.mono + c.step)
}

func (c *steppedClock) elapsed() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mono
}

func (c *steppedClock) advance(d time.Duration) { c.mu.Lock(); c.mono += d; c.mu.Unlock() }
func (c *steppedClock) setWall(d time.Duration) { c.mu.Lock(); c.step += d; c.mu.Unlock() }

// TestWallClockSteps checks that decisions follow the time that went by,
// not a wall clock that is stepped back or forward while sluice runs.
func TestWallClockSteps(t *testing.T) {
	t.Parallel()
	sc := &steppedClock{t0: time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)}
	clock := ratelimit.NewClock(sc.wall, sc.elapsed)
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(up.Close)
	g := clockedGateway(t, `
log: {access_log: false}
routes:
  - name: tb
    match: {path: /tb}
    upstream: `+up.URL+`
    limits: [{algorithm: token_bucket, limit: 60, window: 1m, burst: 1, key: [global]}]
  - name: fw
    match: {path: /fw}
    upstream: `+up.URL+`
    limits: [{algorithm: fixed_window, limit: 1, window: 1m, key: [global]}]
`, clock, io.Discard)
	get := func(path string) (int, string) {
		t.Helper()
		rec := httptest.NewRecorder()
		g.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		return rec.Code, rec.Header().Get("Retry-After")
	}
	check := func(what, path string, wantCode int, wantRetry string) {
		t.Helper()
		if code, retry := get(path); code != wantCode || retry != wantRetry {
			t.Errorf("%s: GET %s got %d with Retry-After %q, want %d with %q", what, path, code, retry, wantCode, wantRetry)
		}
	}

	check("first request", "/tb", 200, "")
	check("first request", "/fw", 200, "")
	check("bucket spent", "/tb", 429, "1")

	// Back an hour: the token comes a second after the last, not an hour
	// and a second.
	sc.setWall(-time.Hour)
	check("wall clock an hour back", "/tb", 429, "1")
	sc.advance(time.Second)
	check("wall clock an hour back, a second later", "/tb", 200, "")

	// Forward an hour: no bucket refills on its own.
	sc.setWall(2 * time.Hour)
	check("wall clock an hour ahead", "/tb", 429, "1")

	// The spent window ends a minute after it began, whatever the wall
	// clock says meanwhile.
	sc.setWall(-2 * time.Hour)
	check("wall clock an hour back, same minute", "/fw", 429, "59")
	sc.advance(30 * time.Minute)
	check("wall clock an hour back, 30 minutes later", "/fw", 200, "")
}

// clockedGateway is a Gateway serving yaml whose decisions, memory store
// and access lines run on clock; its log goes to w.
func clockedGateway(t *testing.T, yaml string, clock *ratelimit.Clock, w io.Writer) *Gateway {
	t.Helper()
	cfg, err := routes.Parse("test.yaml", []byte(yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	store := ratelimit.NewMemoryStore(ratelimit.MemoryOptions{SweepInterval: -1, Clock: clock.Now})
	t.Cleanup(func() { store.Close() })
	g := New(Options{Metrics: metrics.New(), Logger: slog.New(slog.NewJSONHandler(w, nil)), Clock: clock})
	g.Load(cfg, store)
	return g
}
