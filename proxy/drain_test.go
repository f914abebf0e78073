package proxy

import (
	"io"
	"net/http"
	"testing"
	"time"
)

// TestQueuedAfterDrainBegan: a request can reach its queue after the drain
// has begun (an HTTP/2 stream opened just before the GOAWAY, a request read
// just before the listener closed). README (Leaky bucket queueing) holds it
// as one that was waiting already: forwarded when its departure falls
// within the deadline, answered 503 at once otherwise.
func TestQueuedAfterDrainBegan(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		window   string        // one request leaves per window
		deadline time.Duration // from the drain's start
		want     int
	}{
		{"departure within the deadline", "1s", time.Minute, http.StatusOK},
		{"departure after the deadline", "1m", 10 * time.Second, http.StatusServiceUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up := newBodyUpstream(t)
			srv, g := newTestGateway(t, `
policies:
  shaping: {algorithm: leaky_bucket, limit: 1, window: `+tc.window+`, queue: 5, key: [global]}
routes:
  - name: queued
    upstream: %s
    limits: [shaping]
`, up.URL)
			resp, err := testClient.Get(srv.URL + "/first")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			g.Drain(time.Now().Add(tc.deadline))
			began := time.Now()
			if resp, err = testClient.Get(srv.URL + "/second"); err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("queued after the drain began: got %d %q after %v, want %d", resp.StatusCode, b, time.Since(began).Round(100*time.Millisecond), tc.want)
			}
		})
	}
}
