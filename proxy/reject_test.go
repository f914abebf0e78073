package proxy

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/problem"
	"github.com/sluicehq/sluice/ratelimit"
)

// TestRejectionBytes pins the 429 answer of SPEC section 4 to the byte:
// its headers and its problem+json body.
func TestRejectionBytes(t *testing.T) {
	t.Parallel()
	g := allocGateway(t)
	serveOne(t, g, &discardWriter{h: http.Header{}}, "/reject", 200) // spends the only token
	rec := httptest.NewRecorder()
	g.ServeHTTP(rec, newRequest(t, "/reject"))
	if rec.Code != 429 {
		t.Fatalf("status: got %d, want 429", rec.Code)
	}
	wantBody := `{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"rate limit reject#1 of route reject exceeded: 1 requests per 1h0m0s; retry in 3600 s","policy":"reject#1","retry_after":3600}` + "\n"
	if got := rec.Body.String(); got != wantBody {
		t.Errorf("body:\n got %s\nwant %s", got, wantBody)
	}
	for name, want := range map[string]string{
		"Content-Type":            "application/problem+json",
		"Content-Length":          strconv.Itoa(len(wantBody)),
		"Cache-Control":           "no-store",
		"Retry-After":             "3600",
		"X-Ratelimit-Retry-After": "3600",
		"Ratelimit-Policy":        `"reject#1";q=1;w=3600`,
		"Ratelimit":               `"reject#1";r=0;t=3600`,
		"X-Ratelimit-Limit":       "1",
		"X-Ratelimit-Remaining":   "0",
		"X-Ratelimit-Reset":       "3600",
	} {
		if got := rec.Header()[name]; len(got) != 1 || got[0] != want {
			t.Errorf("%s: got %q, want %q", name, got, want)
		}
	}
	if id := rec.Header().Get("X-Request-Id"); len(id) != 32 {
		t.Errorf("X-Request-Id: got %q, want 32 hex digits", id)
	}
}

// TestRejectedBodyMatchesProblem holds the 429 body built from a limit's
// cut body to problem.Write's of the same detail, for names that need
// escaping, windows of every unit and both kinds of rejection.
func TestRejectedBodyMatchesProblem(t *testing.T) {
	t.Parallel()
	names := []string{"otp#1", `q"uote\ <&>`, "tab\tctl\x01", "bad\xff utf-8 \xc3", "sep\u2028 ✓ 𝄞", "", "0"}
	windows := []time.Duration{time.Second, 90 * time.Second, time.Hour, 1500 * time.Millisecond, 250 * time.Microsecond, 24 * time.Hour}
	for _, route := range names {
		for _, name := range names {
			for _, window := range windows {
				p := &ratelimit.Policy{Name: name, Limit: 5, Window: window}
				rb := newRejectedBody(route, p)
				for _, blocked := range []bool{false, true} {
					for _, retry := range []int64{1, 9, 10, 3600, 86400} {
						want := httptest.NewRecorder()
						problem.Write(want, tooManyProblem(route, name, p, blocked, retry))
						got := rb.append(nil, blocked, strconv.FormatInt(retry, 10))
						if string(got) != want.Body.String() {
							t.Fatalf("route %q, policy %q, window %v, blocked %v, retry %d:\n got %s\nwant %s", route, name, window, blocked, retry, got, want.Body.String())
						}
					}
				}
			}
		}
	}
}

// TestREADMERejectionBody keeps README's example 429 body the one the
// gateway writes for its policy: otp-per-phone, 5 per 10m on route otp,
// rejecting for 42 s.
func TestREADMERejectionBody(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	p := &ratelimit.Policy{Name: "otp-per-phone", Limit: 5, Window: 10 * time.Minute}
	rb := newRejectedBody("otp", p)
	body := rb.append(nil, false, "42")
	if want := append([]byte("```json\n"), body...); !bytes.Contains(readme, want) {
		t.Errorf("README.md does not show the 429 body the gateway writes:\n%s", body)
	}
}
