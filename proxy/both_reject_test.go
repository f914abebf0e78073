package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/metrics"
)

// TestOneRejectionCountsOnce: when two limits of a route reject one
// request, the one its 429 names (the one that lifts last) counts it,
// rejected when it starts its block, blocked while the block lasts, and
// the other counts nothing (SPEC §5: "a rejected request counts rejected
// for the limit that rejected it and nothing for the others"), so that
// the rejected counts add up to the 429s. Both blocks start all the same
// (ratelimittest's "both limits reject: each blocks").
func TestOneRejectionCountsOnce(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(up.Close)
	m := metrics.New()
	srv, _ := newGateway(t, `
log: {access_log: false}
policies:
  short: {algorithm: fixed_window, limit: 1, window: 1h, block: 2h, key: [global]}
  long: {algorithm: token_bucket, limit: 1, window: 1h, block: 3h, key: [global]}
routes:
  - name: login
    upstream: %s
    limits: [short, long]
`, up.URL, m)
	for i, want := range []struct {
		code              int
		rejectedBy        string
		rejected, blocked [2]float64 // short, long
	}{
		{200, "", [2]float64{0, 0}, [2]float64{0, 0}},
		{429, "long", [2]float64{0, 1}, [2]float64{0, 0}},
		{429, "long", [2]float64{0, 1}, [2]float64{0, 1}},
	} {
		resp, err := testClient.Get(srv.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want.code {
			t.Fatalf("request %d: got %d, want %d", i, resp.StatusCode, want.code)
		}
		if want.rejectedBy != "" && !strings.Contains(string(body), `"policy":"`+want.rejectedBy+`"`) {
			t.Errorf("request %d: got body %s, want policy %q", i, body, want.rejectedBy)
		}
		for j, p := range []string{"short", "long"} {
			if got := decisionCount(t, m, "login", p, "rejected"); got != want.rejected[j] {
				t.Errorf("request %d, %s rejected: got %v, want %v", i, p, got, want.rejected[j])
			}
			if got := decisionCount(t, m, "login", p, "blocked"); got != want.blocked[j] {
				t.Errorf("request %d, %s blocked: got %v, want %v", i, p, got, want.blocked[j])
			}
		}
	}
}
