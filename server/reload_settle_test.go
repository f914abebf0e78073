package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestReloadUnderHeldCountStatusUnit: a count_status request at its
// upstream when a reload changes its policy's settings, or removes the
// policy and its route, settles its unit after the answer against the
// bucket it took it from: a refund (its status not counted) or a keep
// (counted) never reaches the fresh bucket of the new settings, which
// counts only its own requests, and nothing panics.
func TestReloadUnderHeldCountStatusUnit(t *testing.T) {
	t.Parallel()
	const cfg = `listen: 127.0.0.1:0
admin: 127.0.0.1:0
%s
policies:
%s
routes:
  - name: other
    match: {path_prefix: /other}
    upstream: %s
%s`
	const route = `  - name: login
    upstream: %s
    limits: [login]
`
	for _, store := range []string{"memory", "redis"} {
		for _, alg := range []string{"fixed_window", "token_bucket"} {
			for _, tc := range []struct {
				name   string
				status int  // the held request's answer: 200 refunds, 401 keeps
				remove bool // the reload removes the policy and its route
			}{
				{"changed, refunded", 200, false},
				{"changed, kept", 401, false},
				{"removed, refunded", 200, true},
				{"removed, kept", 401, true},
			} {
				t.Run(store+"/"+alg+"/"+tc.name, func(t *testing.T) {
					t.Parallel()
					storeCfg := ""
					if store == "redis" {
						storeCfg = fmt.Sprintf("store:\n  type: redis\n  redis: {addresses: [\"%s\"], timeout: 1s}", redistest.Start(t).Addr())
					}
					arrived, release := make(chan struct{}, 1), make(chan struct{})
					up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						if r.Header.Get("X-Seq") == "held" {
							arrived <- struct{}{}
							<-release
							w.WriteHeader(tc.status)
							return
						}
						w.WriteHeader(http.StatusUnauthorized)
					}))
					t.Cleanup(up.Close)
					t.Cleanup(func() {
						select {
						case <-release:
						default:
							close(release)
						}
					})
					policy := func(limit int) string {
						return fmt.Sprintf("  login: {algorithm: %s, limit: %d, window: 1h, key: [global], count_status: [401]}", alg, limit)
					}
					r := serve(t, fmt.Sprintf(cfg, storeCfg, policy(2), up.URL, fmt.Sprintf(route, up.URL)))
					admin, url := r.url("admin"), r.url("http")+"/"
					done := make(chan int, 1)
					go func() { done <- sendSeq(context.Background(), url, "held") }()
					select {
					case <-arrived:
					case <-time.After(5 * time.Second):
						t.Fatal("the held request never reached the upstream")
					}
					var after string
					if tc.remove {
						after = fmt.Sprintf(cfg, storeCfg, "  unused: {algorithm: fixed_window, limit: 1, window: 1h, key: [global]}", up.URL, "")
					} else {
						after = fmt.Sprintf(cfg, storeCfg, policy(3), up.URL, fmt.Sprintf(route, up.URL))
					}
					writeFile(t, r.path, after)
					if err := r.Reload(); err != nil {
						t.Fatal(err)
					}
					if !tc.remove {
						// The fresh bucket of limit 3 counts one 401.
						if code := sendSeq(context.Background(), url, "new"); code != http.StatusUnauthorized {
							t.Fatalf("new request: got %d, want the upstream's 401", code)
						}
					}
					close(release)
					select {
					case code := <-done:
						if code != tc.status {
							t.Errorf("held request: got %d, want %d", code, tc.status)
						}
					case <-time.After(5 * time.Second):
						t.Fatal("the held request had no answer within 5s")
					}
					// Settled when the exchange ends, before its access line.
					want := 2
					if tc.remove {
						want = 1
					}
					deadline := time.Now().Add(5 * time.Second)
					for lines(t, r, "login") < want {
						if time.Now().After(deadline) {
							t.Fatalf("access lines of login: got %d within 5s, want %d", lines(t, r, "login"), want)
						}
						time.Sleep(5 * time.Millisecond)
					}
					if rec := r.logs.find(t, "panic"); rec != nil {
						t.Errorf("logged %v", rec)
					}
					if tc.remove {
						return
					}
					code, _, body := get(t, admin+"/v1/limits?policy=login&key=global", "")
					var got struct{ Remaining int64 }
					if code != 200 || json.Unmarshal([]byte(body), &got) != nil {
						t.Fatalf("/v1/limits got %d %s", code, body)
					}
					if got.Remaining != 2 {
						t.Errorf("the new bucket has %d left, want 2 (limit 3, one 401 of its own): the held unit was settled into it", got.Remaining)
					}
				})
			}
		}
	}
}

// lines counts the access lines of route that r logged.
func lines(t *testing.T, r *running, route string) int {
	t.Helper()
	n := 0
	for _, rec := range r.logs.records(t) {
		if rec["msg"] == "request" && rec["route"] == route {
			n++
		}
	}
	return n
}
