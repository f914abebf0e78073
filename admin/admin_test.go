package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/ratelimit"
)

// fakeSource is a Source over fixed policies and a store.
type fakeSource struct {
	policies  map[string]*ratelimit.Policy
	overrides map[string]*ratelimit.Policy // by policy name and key, joined by a space
	token     string
	store     ratelimit.Store
	ready     Readiness
	now       time.Time // the time handlers read; zero: the wall clock's
}

func (f *fakeSource) Override(name, key string) *ratelimit.Policy {
	return f.overrides[name+" "+key]
}
func (f *fakeSource) Overrides(name string) []*ratelimit.Policy {
	var out []*ratelimit.Policy
	for k, p := range f.overrides {
		if strings.HasPrefix(k, name+" ") {
			out = append(out, p)
		}
	}
	return out
}
func (f *fakeSource) AdminToken() string { return f.token }

func (f *fakeSource) ClientKeyProblem(name, key string) string { return "" }

func (f *fakeSource) Policy(name string) *ratelimit.Policy {
	if !f.ready.Loaded {
		panic("Policy called before a configuration is loaded")
	}
	return f.policies[name]
}
func (f *fakeSource) Store() ratelimit.Store { return f.store }
func (f *fakeSource) Ready() Readiness       { return f.ready }
func (f *fakeSource) Now() time.Time {
	if !f.now.IsZero() {
		return f.now
	}
	return time.Now()
}

// failingStore is a store that cannot be reached.
type failingStore struct{ ratelimit.Store }

func (failingStore) Peek(context.Context, time.Time, ratelimit.Request) (ratelimit.Decision, error) {
	return ratelimit.Decision{}, errors.New("dial tcp 127.0.0.1:6379: connection refused")
}

var (
	apiPerKey = ratelimit.MustPolicy(ratelimit.Policy{
		Name: "api-per-key", Algorithm: ratelimit.TokenBucket, Limit: 100, Window: time.Hour,
	})
	otpPerPhone = ratelimit.MustPolicy(ratelimit.Policy{
		Name: "otp-per-phone", Algorithm: ratelimit.SlidingWindowLog, Limit: 5, Window: 10 * time.Minute,
	})
	shaping = ratelimit.MustPolicy(ratelimit.Policy{
		Name: "orders#1", Algorithm: ratelimit.LeakyBucket, Limit: 10, Window: time.Hour, Queue: 5,
	})
)

func newSource(t *testing.T) (*fakeSource, *ratelimit.MemoryStore) {
	t.Helper()
	store := ratelimit.NewMemoryStore(ratelimit.MemoryOptions{SweepInterval: -1})
	t.Cleanup(func() { store.Close() })
	return &fakeSource{
		policies: map[string]*ratelimit.Policy{
			apiPerKey.Name: apiPerKey, otpPerPhone.Name: otpPerPhone, shaping.Name: shaping,
		},
		store: store,
		ready: Readiness{Loaded: true, StoreHealthy: true},
	}, store
}

// decide takes n requests from the bucket (p, key) now.
func decide(t *testing.T, s ratelimit.Store, p *ratelimit.Policy, key string, n int) {
	t.Helper()
	out := make([]ratelimit.Decision, 1)
	for range n {
		if err := s.Decide(context.Background(), time.Now(), []ratelimit.Request{{Policy: p, Key: key}}, out); err != nil {
			t.Fatalf("deciding: %v", err)
		}
	}
}

func get(t *testing.T, h http.Handler, method, target string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, target, nil))
	return rec
}

func limitsURL(policy, key string) string {
	return "/v1/limits?" + url.Values{"policy": {policy}, "key": {key}}.Encode()
}

func TestLimits(t *testing.T) {
	t.Parallel()
	src, store := newSource(t)
	decide(t, store, apiPerKey, "abc", 3)
	decide(t, store, otpPerPhone, "+15550100|203.0.113.7", 2)
	decide(t, store, shaping, "", 3)
	h := Handler(metrics.New(), src)
	for _, tc := range []struct {
		name, policy, key, want string
	}{
		// 3 tokens taken at 36s each: whole again in 108s.
		{"token_bucket", "api-per-key", "abc",
			`{"policy":"api-per-key","key":"abc","algorithm":"token_bucket","limit":100,"remaining":97,"reset_seconds":108}`},
		{"untouched bucket", "api-per-key", "nobody",
			`{"policy":"api-per-key","key":"nobody","algorithm":"token_bucket","limit":100,"remaining":100,"reset_seconds":0}`},
		// The composite key is looked up as sent, "|" included.
		{"sliding_window_log composite key", "otp-per-phone", "+15550100|203.0.113.7",
			`{"policy":"otp-per-phone","key":"+15550100|203.0.113.7","algorithm":"sliding_window_log","limit":5,"remaining":3,"reset_seconds":600}`},
		// One leaving, two waiting of five places, 6 minutes apart: three
		// more places, whole again once all three have left.
		{"leaky_bucket global", "orders#1", "",
			`{"policy":"orders#1","key":"","algorithm":"leaky_bucket","limit":10,"remaining":3,"reset_seconds":1080}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec := get(t, h, "GET", limitsURL(tc.policy, tc.key))
			if got, want := rec.Code, 200; got != want {
				t.Fatalf("status: got %d, want %d (%s)", got, want, rec.Body)
			}
			if got, want := rec.Header().Get("Content-Type"), "application/json"; got != want {
				t.Errorf("content type: got %q, want %q", got, want)
			}
			if got := strings.TrimSpace(rec.Body.String()); got != tc.want {
				t.Errorf("body: got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestLimitsNeverConsume(t *testing.T) {
	t.Parallel()
	src, store := newSource(t)
	p := ratelimit.MustPolicy(ratelimit.Policy{Name: "tight", Algorithm: ratelimit.FixedWindow, Limit: 2, Window: 24 * time.Hour})
	src.policies[p.Name] = p
	decide(t, store, p, "k", 1)
	h := Handler(metrics.New(), src)
	for i := range 5 {
		var got Limits
		rec := get(t, h, "GET", limitsURL("tight", "k"))
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
			t.Fatalf("decoding %s: %v", rec.Body, err)
		}
		if got.Remaining != 1 {
			t.Fatalf("peek %d: got remaining %d, want 1", i, got.Remaining)
		}
	}
	out := make([]ratelimit.Decision, 1)
	if err := store.Decide(context.Background(), time.Now(), []ratelimit.Request{{Policy: p, Key: "k"}}, out); err != nil {
		t.Fatalf("deciding: %v", err)
	}
	if !out[0].Allowed || out[0].Remaining != 0 {
		t.Errorf("after peeking: got allowed %v remaining %d, want allowed true remaining 0", out[0].Allowed, out[0].Remaining)
	}
}

// problemBody is the part of a problem+json answer the tests check.
type problemBody struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

func TestErrors(t *testing.T) {
	t.Parallel()
	src, _ := newSource(t)
	down := &fakeSource{policies: src.policies, store: failingStore{}, ready: Readiness{Loaded: true}}
	notLoaded := &fakeSource{}
	// A store can exist before the first configuration is loaded; the
	// policies must not be asked for then.
	storeOnly := &fakeSource{store: src.store}
	for _, tc := range []struct {
		name, method, target string
		src                  Source
		code                 int
		allow                string
	}{
		{"unknown policy", "GET", limitsURL("nope", "abc"), src, 404, ""},
		{"missing policy", "GET", "/v1/limits?key=abc", src, 400, ""},
		{"empty policy", "GET", "/v1/limits?policy=&key=abc", src, 400, ""},
		{"post", "POST", limitsURL("api-per-key", "abc"), src, 405, "GET, HEAD, DELETE"},
		{"delete without admin_token", "DELETE", limitsURL("api-per-key", "abc"), src, 403, ""},
		{"delete healthz", "DELETE", "/healthz", src, 405, "GET, HEAD"},
		{"post healthz", "POST", "/healthz", src, 405, "GET, HEAD"},
		{"store down", "GET", limitsURL("api-per-key", "abc"), down, 503, ""},
		{"not loaded", "GET", limitsURL("api-per-key", "abc"), notLoaded, 503, ""},
		{"store before config", "GET", limitsURL("api-per-key", "abc"), storeOnly, 503, ""},
		{"unknown path", "GET", "/v1/nothing", src, 404, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec := get(t, Handler(metrics.New(), tc.src), tc.method, tc.target)
			if got := rec.Code; got != tc.code {
				t.Errorf("status: got %d, want %d", got, tc.code)
			}
			if got, want := rec.Header().Get("Content-Type"), "application/problem+json"; got != want {
				t.Errorf("content type: got %q, want %q", got, want)
			}
			if got := rec.Header().Get("Allow"); got != tc.allow {
				t.Errorf("allow: got %q, want %q", got, tc.allow)
			}
			var p problemBody
			if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
				t.Fatalf("decoding %s: %v", rec.Body, err)
			}
			if p.Type != "about:blank" || p.Status != tc.code || p.Title != http.StatusText(tc.code) || p.Detail == "" {
				t.Errorf("body: got %+v, want type about:blank, status %d, title %q and a detail", p, tc.code, http.StatusText(tc.code))
			}
		})
	}
}

func TestProbes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		ready Readiness
		code  int
		body  string
	}{
		{"loaded and healthy", Readiness{Loaded: true, StoreHealthy: true}, 200, `{"status":"ok"}`},
		{"healthy with deny", Readiness{Loaded: true, StoreHealthy: true, DenyOnStoreError: true}, 200, `{"status":"ok"}`},
		{"store down, falls back", Readiness{Loaded: true}, 200, `{"status":"degraded"}`},
		{"store down, deny", Readiness{Loaded: true, DenyOnStoreError: true}, 503, `{"status":"unavailable"}`},
		{"not loaded", Readiness{StoreHealthy: true}, 503, `{"status":"unavailable"}`},
		{"draining", Readiness{Loaded: true, StoreHealthy: true, Draining: true}, 503, `{"status":"draining"}`},
		{"draining, store down", Readiness{Loaded: true, Draining: true}, 503, `{"status":"draining"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := Handler(metrics.New(), &fakeSource{ready: tc.ready})
			rec := get(t, h, "GET", "/readyz")
			if got := rec.Code; got != tc.code {
				t.Errorf("readyz status: got %d, want %d", got, tc.code)
			}
			if got := strings.TrimSpace(rec.Body.String()); got != tc.body {
				t.Errorf("readyz body: got %s, want %s", got, tc.body)
			}
			// The process is up whatever the readiness.
			rec = get(t, h, "GET", "/healthz")
			if got, want := rec.Code, 200; got != want {
				t.Errorf("healthz status: got %d, want %d", got, want)
			}
			if got, want := strings.TrimSpace(rec.Body.String()), `{"status":"ok"}`; got != want {
				t.Errorf("healthz body: got %s, want %s", got, want)
			}
		})
	}
}

func TestMetricsEndpoint(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	m.Route("api", nil).Request(200, time.Millisecond)
	src, _ := newSource(t)
	rec := get(t, Handler(m, src), "GET", "/metrics")
	if got, want := rec.Code, 200; got != want {
		t.Fatalf("status: got %d, want %d", got, want)
	}
	if want := `sluice_http_requests_total{code="200",route="api"} 1`; !strings.Contains(rec.Body.String(), want) {
		t.Errorf("body: got no line %q", want)
	}
}

func TestOverHTTP(t *testing.T) {
	t.Parallel()
	src, store := newSource(t)
	decide(t, store, apiPerKey, "abc", 1)
	srv := httptest.NewServer(Handler(metrics.New(), src))
	defer srv.Close()
	c := srv.Client()
	c.Timeout = 5 * time.Second
	res, err := c.Head(srv.URL + limitsURL("api-per-key", "abc"))
	if err != nil {
		t.Fatalf("head: %v", err)
	}
	res.Body.Close()
	if got, want := res.StatusCode, 200; got != want {
		t.Errorf("head status: got %d, want %d", got, want)
	}
	res, err = c.Get(srv.URL + limitsURL("api-per-key", "abc"))
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	defer res.Body.Close()
	var got Limits
	if err := json.NewDecoder(res.Body).Decode(&got); err != nil {
		t.Fatalf("decoding: %v", err)
	}
	if got.Remaining != 99 {
		t.Errorf("remaining: got %d, want 99", got.Remaining)
	}
}
