package proxy

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
)

// failingTransport fails every request with err.
type failingTransport struct{ err error }

func (f failingTransport) RoundTrip(*http.Request) (*http.Response, error) { return nil, f.err }

// TestUnreachableUpstreamIs502: SPEC §4, an upstream that cannot be
// reached is a 502 and only one that sends no response headers within the
// route's timeout a 504. A connection or TLS handshake that times out is
// the former (counted kind="timeout" all the same).
func TestUnreachableUpstreamIs502(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"dial timeout", &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}},
		{"tls handshake timeout", fmt.Errorf("net/http: TLS handshake timeout: %w", os.ErrDeadlineExceeded)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := routes.Parse("test.yaml", []byte("routes:\n  - name: r\n    upstream: http://127.0.0.1:9\n"), func(string) (string, bool) { return "", false })
			if err != nil {
				t.Fatal(err)
			}
			store := ratelimit.NewMemoryStore(ratelimit.MemoryOptions{})
			defer store.Close()
			m := metrics.New()
			g := New(Options{Metrics: m, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), Transport: failingTransport{tc.err}})
			g.Load(cfg, store)
			w := httptest.NewRecorder()
			g.ServeHTTP(w, httptest.NewRequest("GET", "/x", nil))
			if w.Code != http.StatusBadGateway || !strings.Contains(w.Body.String(), "unavailable") {
				t.Errorf("got %d %s, want 502 problem+json", w.Code, w.Body)
			}
			rec := httptest.NewRecorder()
			m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
			if want := `sluice_upstream_errors_total{kind="timeout",route="r"} 1`; !strings.Contains(rec.Body.String(), want) {
				t.Errorf("metrics: want %s", want)
			}
		})
	}
}
