package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
)

// TestGivenBackAnswerShowsIt: a unit given back (count_status) goes back
// before the answer leaves, and the answer's limit fields say so: r counts
// it, and t and X-RateLimit-Reset are 0 once the bucket is whole again. A
// bucket that another failure still holds shows that one spent.
//
// The gateway runs on a clock that stands still: t counts whole seconds
// to the bucket's reset, and on the real clock a second boundary falling
// between the failure's answer and the next one takes t down by one.
func TestGivenBackAnswerShowsIt(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("fail") {
			w.WriteHeader(http.StatusUnauthorized)
		}
	}))
	t.Cleanup(up.Close)
	for _, alg := range []string{"token_bucket", "fixed_window", "sliding_window_counter", "sliding_window_log"} {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			srv := newStoppedClockGateway(t, `
routes:
  - name: login
    upstream: `+up.URL+`
    limits:
      - {algorithm: `+alg+`, limit: 5, window: 15m, key: [ip], count_status: [401]}
`)
			post := func(query string) *http.Response {
				resp, err := testClient.Post(srv.URL+"/login"+query, "application/json", strings.NewReader("{}"))
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return resp
			}
			for i := range 2 {
				resp := post("")
				if got, want := resp.Header.Get("RateLimit"), `"login#1";r=5;t=0`; got != want {
					t.Errorf("success %d, its unit given back: RateLimit got %q, want %q", i+1, got, want)
				}
				if got, want := resp.Header.Get("X-RateLimit-Remaining")+" "+resp.Header.Get("X-RateLimit-Reset"), "5 0"; got != want {
					t.Errorf("success %d: X-RateLimit-Remaining and -Reset got %q, want %q", i+1, got, want)
				}
			}
			failed := post("?fail")
			resp := post("")
			if got, want := resp.Header.Get("RateLimit"), fmt.Sprintf(`"login#1";r=4;t=%s`, strings.TrimPrefix(failed.Header.Get("RateLimit"), `"login#1";r=4;t=`)); got != want {
				t.Errorf("success after a failure: RateLimit got %q, want %q (the failure still spent)", got, want)
			}
			// The clock stands still: given back, the bucket is as the
			// failure left it, and so are the classic fields. A
			// sliding_window_counter's Reset, when its bucket is not
			// whole, stays as decided (with two units counted): later
			// than the failure's, never earlier.
			if got, want := resp.Header.Get("X-RateLimit-Remaining"), failed.Header.Get("X-RateLimit-Remaining"); got != want {
				t.Errorf("success after a failure: X-RateLimit-Remaining got %q, want %q (as the failure left the bucket)", got, want)
			}
			got, want := resp.Header.Get("X-RateLimit-Reset"), failed.Header.Get("X-RateLimit-Reset")
			if alg == "sliding_window_counter" {
				if g, w := atoi(t, got), atoi(t, want); g < w {
					t.Errorf("success after a failure: X-RateLimit-Reset got %d, want at least the failure's %d", g, w)
				}
			} else if got != want {
				t.Errorf("success after a failure: X-RateLimit-Reset got %q, want %q (as the failure left the bucket)", got, want)
			}
		})
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return n
}

// newStoppedClockGateway serves yaml with a gateway and a memory store on
// a clock that never advances.
func newStoppedClockGateway(t *testing.T, yaml string) *httptest.Server {
	t.Helper()
	sc := &steppedClock{t0: time.Date(2026, 1, 1, 10, 3, 20, 0, time.UTC)}
	srv := httptest.NewUnstartedServer(clockedGateway(t, yaml, ratelimit.NewClock(sc.wall, sc.elapsed), io.Discard))
	srv.Config.ConnContext = WithConn
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}
