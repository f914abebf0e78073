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
	return newGateway(tb, yaml, upstream, metrics.New())
}

func newGateway(tb testing.TB, yaml string, upstream string, m *metrics.Metrics) (*httptest.Server, *Gateway) {
	tb.Helper()
	cfg, err := routes.Parse("test.yaml", []byte(fmt.Sprintf(yaml, upstream)), func(string) (string, bool) { return "", false })
	if err != nil {
		tb.Fatal(err)
	}
	store := ratelimit.NewMemoryStore(ratelimit.MemoryOptions{})
	tb.Cleanup(func() { store.Close() })
	g := New(Options{Metrics: m, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	g.Load(cfg, store)
	srv := httptest.NewUnstartedServer(g)
	srv.Config.ConnContext = WithConn // as the gateway's listeners have it
	srv.Start()
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
      - {algorithm: token_bucket, limit: 1000000000, window: 1000s, key: [header:X-API-Key]}
`

// BenchmarkRequestPath measures client -> sluice -> upstream over loopback.
// plain is a route without limits; limited adds a token_bucket that never
// rejects, so the difference is what limiting costs; bare is limited with
// metrics and the access log off, so limited/bare is what observability
// costs.
func BenchmarkRequestPath(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok"))
	}))
	defer up.Close()
	full, _ := newTestGateway(b, benchConfig, up.URL)
	bare, _ := newGateway(b, benchConfig+"log: {access_log: false}\n", up.URL, nil)
	tr := &http.Transport{MaxIdleConnsPerHost: 256}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	for _, bc := range []struct{ name, url string }{
		{"plain", full.URL + "/plain"},
		{"limited", full.URL + "/limited"},
		{"bare", bare.URL + "/limited"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				req, _ := http.NewRequest("GET", bc.url, nil)
				req.Header.Set("X-API-Key", "bench")
				for pb.Next() {
					benchSend(b, c, req)
				}
			})
		})
	}
}

// benchSend sends req through c and reads the answer, which must be a 200.
func benchSend(b *testing.B, c *http.Client, req *http.Request) {
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
