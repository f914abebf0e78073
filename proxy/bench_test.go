package proxy

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
)

// newTestGateway serves yaml (with %s replaced by the upstream URL) through a
// Gateway on a loopback listener.
func newTestGateway(tb testing.TB, yaml string, upstream string) (*httptest.Server, *Gateway) {
	tb.Helper()
	cfg, err := routes.Parse("test.yaml", []byte(fmt.Sprintf(yaml, upstream)), func(string) (string, bool) { return "", false })
	if err != nil {
		tb.Fatal(err)
	}
	store := ratelimit.NewMemoryStore(ratelimit.MemoryOptions{})
	tb.Cleanup(func() { store.Close() })
	g := New(Options{Metrics: metrics.New(), Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	g.Load(cfg, store)
	srv := httptest.NewServer(g)
	tb.Cleanup(srv.Close)
	return srv, g
}

const benchConfig = `
routes:
  - name: plain
    match: {path_prefix: /plain}
    upstream: %[1]s
  - name: limited
    match: {path_prefix: /limited}
    upstream: %[1]s
    limits:
      - {algorithm: token_bucket, limit: 1000000000, window: 1s, key: [header:X-API-Key]}
`

// BenchmarkRequestPath measures client -> sluice -> upstream over loopback,
// on a route without limits and on one with a token_bucket that never
// rejects, so the difference is what limiting costs.
func BenchmarkRequestPath(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok"))
	}))
	defer up.Close()
	srv, _ := newTestGateway(b, benchConfig, up.URL)
	tr := &http.Transport{MaxIdleConnsPerHost: 256}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	for _, path := range []string{"/plain", "/limited"} {
		b.Run(path[1:], func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				req, _ := http.NewRequest("GET", srv.URL+path, nil)
				req.Header.Set("X-API-Key", "bench")
				for pb.Next() {
					resp, err := c.Do(req)
					if err != nil {
						b.Fatal(err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Fatalf("status %d", resp.StatusCode)
					}
				}
			})
		})
	}
}
