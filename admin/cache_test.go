package admin

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice/metrics"
)

// TestAnswersAreNotCacheable: every admin answer, /metrics's included,
// tells caches not to keep it; a cache between the scraper and sluice
// would otherwise serve stale counters.
func TestAnswersAreNotCacheable(t *testing.T) {
	t.Parallel()
	src, _ := newSource(t)
	srv := httptest.NewServer(Handler(metrics.New(), src))
	defer srv.Close()
	c := srv.Client()
	c.Timeout = 5 * time.Second
	for _, path := range []string{"/metrics", "/healthz", "/readyz", limitsURL("api-per-key", "abc"), "/nothing"} {
		for _, method := range []string{"GET", "HEAD"} {
			req, _ := http.NewRequest(method, srv.URL+path, nil)
			res, err := c.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			res.Body.Close()
			if got, want := res.Header.Get("Cache-Control"), "no-store"; got != want {
				t.Errorf("%s %s: Cache-Control: got %q, want %q", method, path, got, want)
			}
		}
	}
}
