package proxy

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/simulate"
)

// TestAccessLogTimeIsDecisionTime: the gateway decides on its Clock
// (wall time at start plus monotonic time since), but stamps access lines
// with time.Now(), the wall clock as it is now. Whenever the two part
// (the wall clock stepped by NTP or by hand; a VM paused or suspended,
// during which Linux's monotonic clock stands still while the wall clock
// goes on), `sluice simulate -replay` of the gateway's own log places the
// requests at times the gateway did not decide them at, and predicts other
// decisions. Here an hour passes on the gateway's clock between two
// requests (an hour-long pause not seen by the wall clock, i.e. the wall
// clock stepped back an hour): the gateway admits both, the replay of its
// log rejects the second.
func TestAccessLogTimeIsDecisionTime(t *testing.T) {
	t.Parallel()
	sc := &steppedClock{t0: time.Now()}
	clock := ratelimit.NewClock(sc.wall, sc.elapsed)
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(up.Close)
	var mu sync.Mutex
	var log bytes.Buffer
	g := clockedGateway(t, `
routes:
  - name: tb
    match: {path: /tb}
    upstream: `+up.URL+`
    limits: [{algorithm: token_bucket, limit: 1, window: 1h, key: [global]}]
`, clock, &lockedWriter{mu: &mu, b: &log})
	admitted := 0
	for i := range 2 {
		if i == 1 {
			sc.advance(time.Hour)
		}
		rec := httptest.NewRecorder()
		g.ServeHTTP(rec, httptest.NewRequest("GET", "/tb", nil))
		if rec.Code == 200 {
			admitted++
		}
	}
	mu.Lock()
	text := log.String()
	mu.Unlock()
	tr, _, err := simulate.ReadLog(bytes.NewReader([]byte(text)), simulate.ReplayOptions{Key: []string{"global"}})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := simulate.Simulate(simulate.Params{Limit: 1, Window: time.Hour}, tr, simulate.Options{Algorithms: []ratelimit.Algorithm{ratelimit.TokenBucket}})
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].Accepted != admitted {
		t.Errorf("the gateway admitted %d of 2 (an hour apart on its clock); the replay of its log admits %d\nlog:\n%s", admitted, rs[0].Accepted, text)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}
