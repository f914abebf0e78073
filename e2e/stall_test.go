package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestBruteForceRedisStallLateReply: a Redis that stalls past the
// decision timeout has the gateways decide a guess in their fallback;
// the script they sent runs once Redis resumes, and its late reply
// comes after the request was answered and done with. Each gateway
// gives back what that script took, and keeps serving: the guesser's
// phone is counted once, in the fallback, and Redis then admits exactly
// its limit of further failures, shared by both instances.
func TestBruteForceRedisStallLateReply(t *testing.T) {
	rs := redistest.Start(t)
	up := newUpstream(t)
	var failures atomic.Int64
	up.Handle = func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Password") == "right" {
			w.WriteHeader(http.StatusOK)
			return
		}
		failures.Add(1)
		w.WriteHeader(http.StatusUnauthorized)
	}
	cfg := writeConfig(t, fmt.Sprintf(`listen: 127.0.0.1:0
admin: 127.0.0.1:0
log: {access_log: false}
store:
  type: redis
  redis: {addresses: [%q], timeout: 200ms, on_error: local}
policies:
  otp:
    algorithm: sliding_window_log
    limit: 3
    window: 10m
    key: [json:phone]
    count_status: [401]
    block: 1h
routes:
  - name: verify
    match: {path: /verify, methods: [POST]}
    upstream: %s
    limits: [otp]
`, rs.Addr(), up.URL))
	ins := []*instance{start(t, cfg), start(t, cfg)}
	try := func(in *instance, phone, password string) int {
		req, _ := http.NewRequest("POST", in.HTTP+"/verify", strings.NewReader(fmt.Sprintf(`{"phone":%q}`, phone)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Password", password)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("POST /verify: %v", err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// Each instance has its connection to Redis before the stall.
	for _, in := range ins {
		if got := try(in, "+15550000", "right"); got != 200 {
			t.Fatalf("warm-up: got %d, want 200", got)
		}
	}

	rs.Pause()
	for i, in := range ins {
		if got := try(in, "+15550001", "guess"); got != 401 {
			t.Fatalf("guess %d while Redis stalls: got %d, want 401", i, got)
		}
	}
	// The scripts run now, well within the time their replies are awaited.
	time.Sleep(300 * time.Millisecond)
	rs.Resume()
	time.Sleep(2500 * time.Millisecond)

	for i, in := range ins {
		select {
		case <-in.exited:
			t.Fatalf("instance %d exited after Redis resumed: %v\n%s", i, in.err, strings.Join(in.logs.Lines(), "\n"))
		default:
		}
	}
	codes := map[int]int{}
	for i := range 8 {
		codes[try(ins[i%2], "+15550001", "guess")]++
	}
	if codes[401] != 3 || codes[429] != 5 {
		t.Errorf("after the stall: got %v, want 3 x 401 then 5 x 429 (Redis counts the stalled guesses nowhere)", codes)
	}
	if got := failures.Load(); got != 5 {
		t.Errorf("upstream saw %d failures, want 5 (2 in the fallbacks, 3 in Redis)", got)
	}
}
