package e2e

import (
	"fmt"
	"strconv"
	"testing"
)

// TestFloodKeepsSpentBudget spends two budgets through the real binary,
// then floods it with new keys: on another route's policy, past
// store.memory.max_keys, and on a spent policy's own, past its own
// max_keys. Neither budget comes back: a flood of new keys evicts no
// other policy's buckets, and an evicted bucket comes back no fuller.
func TestFloodKeepsSpentBudget(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	in := start(t, writeConfig(t, fmt.Sprintf(`listen: 127.0.0.1:0
admin: ""
log: {access_log: false}
store: {memory: {max_keys: 2000}}
policies:
  per-ip: {algorithm: fixed_window, limit: 2, window: 1h, key: [ip]}
  per-phone: {algorithm: sliding_window_log, limit: 2, window: 1h, key: [header:X-Phone], max_keys: 100}
  junk: {algorithm: token_bucket, limit: 100, window: 1m, key: [header:X-Junk]}
routes:
  - name: otp
    match: {path_prefix: /otp}
    upstream: %s
    limits: [per-ip]
  - name: sms
    match: {path_prefix: /sms}
    upstream: %[1]s
    limits: [per-phone]
  - name: other
    match: {path_prefix: /}
    upstream: %[1]s
    limits: [junk]
`, up.URL)))
	send := func(path string, header map[string]string) int {
		resp, _ := do(t, nil, "POST", in.HTTP+path, nil, header)
		return resp.StatusCode
	}
	victim := map[string]string{"X-Phone": "+15550100"}
	for _, path := range []string{"/otp", "/sms"} {
		for i := range 2 {
			if got := send(path, victim); got != 200 {
				t.Fatalf("%s request %d: got %d, want 200", path, i+1, got)
			}
		}
		if got := send(path, victim); got != 429 {
			t.Fatalf("%s, budget spent: got %d, want 429", path, got)
		}
	}
	// 5,000 junk keys on another route, 2.5 times max_keys.
	for i := range 5000 {
		if got := send("/junk", map[string]string{"X-Junk": strconv.Itoa(i)}); got != 200 {
			t.Fatalf("junk %d: got %d, want 200", i, got)
		}
	}
	if got := send("/otp", victim); got != 429 {
		t.Errorf("otp after a flood on another policy: got %d, want 429 (per-ip spent)", got)
	}
	// 500 new phones on the spent policy, 5 times its max_keys. So many
	// live buckets evicted within their window may make some new phones
	// start spent (the store's record of evicted buckets folds), which
	// fails closed: their status is not what is tested.
	for i := range 500 {
		send("/sms", map[string]string{"X-Phone": "+1666" + strconv.Itoa(i)})
	}
	if got := send("/sms", victim); got != 429 {
		t.Errorf("sms after a flood on its own policy: got %d, want 429 (per-phone spent)", got)
	}
}
