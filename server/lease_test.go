package server

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestLeasedPolicyThroughTheGateway serves a fixed_window policy with
// sync: lease on a real Redis: a window of 500 admits exactly 500 of 800
// requests, Redis sees fewer round trips than requests, and the lease
// metrics count them.
func TestLeasedPolicyThroughTheGateway(t *testing.T) {
	t.Parallel()
	srv, up := leaseParts(t)
	r := serve(t, leasedConfig(srv, up, 500))
	codes := map[int]int{}
	for range 800 {
		code, _, _ := get(t, r.url("http")+"/", "")
		codes[code]++
	}
	if codes[http.StatusOK] != 500 || codes[http.StatusTooManyRequests] != 300 {
		t.Errorf("got statuses %v, want 500 x 200 and 300 x 429", codes)
	}
	_, _, body := get(t, r.url("admin")+"/metrics", "")
	granted := metricValue(t, body, `sluice_ratelimit_lease_requests_total{policy="global",result="granted"}`)
	if granted < 1 || granted > 800/5 {
		t.Errorf("got %v granting lease calls for 800 requests, want 1 to 160", granted)
	}
	if !strings.Contains(body, `sluice_ratelimit_lease_instances 1`) {
		t.Errorf("metrics lack sluice_ratelimit_lease_instances 1")
	}
}

// TestLeaseGivenBackOnShutdown stops a gateway whose lease holds units:
// once Serve returns, Redis counts only the requests admitted, and a
// reload that changes the policy starts from a fresh bucket.
func TestLeaseGivenBackOnShutdown(t *testing.T) {
	t.Parallel()
	srv, up := leaseParts(t)
	r := serve(t, leasedConfig(srv, up, 100_000))
	for range 300 {
		if code, _, _ := get(t, r.url("http")+"/", ""); code != http.StatusOK {
			t.Fatalf("GET: got %d, want 200", code)
		}
	}
	counted := func() int {
		keys := strings.Fields(srv.Do("KEYS", "sluice:{global|global}:*"))
		n := 0
		for _, k := range keys {
			f := strings.Fields(srv.Do("GET", k))
			if len(f) == 2 {
				c, _ := strconv.Atoi(f[1])
				n += c
			}
		}
		return n
	}
	if got := counted(); got <= 300 {
		t.Fatalf("Redis counts %d while serving, want more than the 300 admitted (the lease holds the rest)", got)
	}
	// A reload to another limit gets a bucket of its own: 5 admitted of 10.
	writeFile(t, r.path, leasedConfig(srv, up, 5))
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	codes := map[int]int{}
	for range 10 {
		code, _, _ := get(t, r.url("http")+"/", "")
		codes[code]++
	}
	if codes[http.StatusOK] != 5 {
		t.Errorf("after a reload to limit 5: got statuses %v, want 5 x 200", codes)
	}
	r.stop()
	<-r.done
	if got := counted(); got != 305 {
		t.Errorf("Redis counts %d after shutdown, want the 305 admitted over both buckets", got)
	}
}

// leaseParts starts a redis-server and an upstream that answers 200.
func leaseParts(t *testing.T) (*redistest.Server, *httptest.Server) {
	t.Helper()
	srv := redistest.Start(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(up.Close)
	return srv, up
}

// leasedConfig is a gateway on srv whose one route to up has a global
// fixed_window of limit per hour with sync: lease.
func leasedConfig(srv *redistest.Server, up *httptest.Server, limit int) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
admin: 127.0.0.1:0
store:
  type: redis
  redis: {addresses: ["%s"], timeout: 1s}
policies:
  global:
    {algorithm: fixed_window, limit: %d, window: 1h, key: [global], sync: lease}
routes:
  - name: r
    upstream: %s
    limits: [global]
`, srv.Addr(), limit, up.URL)
}

// metricValue returns the value of the series named exactly by series.
func metricValue(t *testing.T, body, series string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("metrics lack %s", series)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
