package admin

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/ratelimit"
)

const testToken = "tok-3f9a1c"

func del(t *testing.T, h http.Handler, target, auth string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodDelete, target, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestResetLimits(t *testing.T) {
	t.Parallel()
	src, store := newSource(t)
	src.token = testToken
	m := metrics.New()
	h := Handler(m, src)
	blocking := ratelimit.MustPolicy(ratelimit.Policy{Name: "logins", Algorithm: ratelimit.FixedWindow, Limit: 1, Window: time.Hour, Block: 2 * time.Hour})
	src.policies["logins"] = blocking
	decide(t, store, blocking, "alice", 3)
	decide(t, store, blocking, "bob", 3)

	// GET shows the block, whole seconds rounded up.
	rec := get(t, h, "GET", limitsURL("logins", "alice"))
	if !strings.Contains(rec.Body.String(), `"blocked_seconds":7200`) && !strings.Contains(rec.Body.String(), `"blocked_seconds":7199`) {
		t.Errorf("GET while blocked: got %s, want blocked_seconds near 7200", rec.Body)
	}

	for _, tc := range []struct {
		name, auth string
		code       int
	}{
		{"no token", "", 401},
		{"wrong token", "Bearer tok-3f9a1d", 401},
		{"prefix of the token", "Bearer tok-3f9a", 401},
		{"token with more", "Bearer " + testToken + "x", 401},
		{"basic scheme", "Basic " + testToken, 401},
		{"empty bearer", "Bearer ", 401},
	} {
		rec := del(t, h, limitsURL("logins", "alice"), tc.auth)
		if rec.Code != tc.code {
			t.Errorf("%s: got %d, want %d", tc.name, rec.Code, tc.code)
		}
		if got := rec.Header().Get("WWW-Authenticate"); got != "Bearer" {
			t.Errorf("%s: WWW-Authenticate got %q, want Bearer", tc.name, got)
		}
		if strings.Contains(rec.Body.String(), testToken[:6]) {
			t.Errorf("%s: body %s shows the token", tc.name, rec.Body)
		}
	}
	if d, _ := store.Peek(context.Background(), time.Now(), ratelimit.Request{Policy: blocking, Key: "alice"}); !d.Blocked {
		t.Fatalf("after refused resets: got %+v, want still blocked", d)
	}

	if rec := del(t, h, limitsURL("nope", "alice"), "Bearer "+testToken); rec.Code != 404 {
		t.Errorf("unknown policy: got %d, want 404", rec.Code)
	}
	rec = del(t, h, limitsURL("logins", "alice"), "bearer "+testToken)
	if rec.Code != 204 || rec.Body.Len() != 0 {
		t.Fatalf("reset: got %d %q, want 204 and no body", rec.Code, rec.Body)
	}
	rec = get(t, h, "GET", limitsURL("logins", "alice"))
	if want := `{"policy":"logins","key":"alice","algorithm":"fixed_window","limit":1,"remaining":1,"reset_seconds":0}` + "\n"; rec.Body.String() != want {
		t.Errorf("GET after reset: got %s, want %s", rec.Body, want)
	}
	// Another key keeps its block.
	if d, _ := store.Peek(context.Background(), time.Now(), ratelimit.Request{Policy: blocking, Key: "bob"}); !d.Blocked {
		t.Errorf("other key: got %+v, want still blocked", d)
	}
	// The token appears in no metric.
	mrec := get(t, h, "GET", "/metrics")
	if strings.Contains(mrec.Body.String(), testToken) {
		t.Errorf("metrics show the admin token")
	}
}

// TestLimitsOverride reads and resets the bucket of a key that an
// override gives its own limit.
func TestLimitsOverride(t *testing.T) {
	t.Parallel()
	src, store := newSource(t)
	src.token = testToken
	partner := ratelimit.MustPolicy(ratelimit.Policy{Name: "api-per-key#override1", Algorithm: ratelimit.TokenBucket, Limit: 5000, Window: time.Hour})
	src.overrides = map[string]*ratelimit.Policy{"api-per-key partner": partner}
	decide(t, store, partner, "partner", 4)
	h := Handler(metrics.New(), src)
	rec := get(t, h, "GET", limitsURL("api-per-key", "partner"))
	if want := `{"policy":"api-per-key","key":"partner","algorithm":"token_bucket","limit":5000,"remaining":4996,"reset_seconds":3}` + "\n"; rec.Body.String() != want {
		t.Errorf("GET: got %s, want %s", rec.Body, want)
	}
	if rec := del(t, h, limitsURL("api-per-key", "partner"), "Bearer "+testToken); rec.Code != 204 {
		t.Fatalf("DELETE: got %d, want 204", rec.Code)
	}
	if d, _ := store.Peek(context.Background(), time.Now(), ratelimit.Request{Policy: partner, Key: "partner"}); d.Remaining != 5000 {
		t.Errorf("after DELETE: got remaining %d, want 5000", d.Remaining)
	}
}

func TestTokenMatches(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		header string
		want   bool
	}{
		{"Bearer s3cret", true},
		{"bearer s3cret", true},
		{"Bearer  s3cret ", true},
		{"Bearer s3cre", false},
		{"Bearer s3cretx", false},
		{"s3cret", false},
		{"Bearer", false},
		{"", false},
	} {
		if got := tokenMatches(tc.header, "s3cret"); got != tc.want {
			t.Errorf("%q: got %v, want %v", tc.header, got, tc.want)
		}
	}
}
