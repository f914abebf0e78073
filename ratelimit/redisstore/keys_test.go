package redisstore

import (
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
)

// TestKeyHashTagHoldsAgainstBraces checks that key values a client chooses
// cannot end the {policy|key} hash tag early: keys containing "}" spread
// over the slots like any others, and escaping never makes two keys one.
func TestKeyHashTagHoldsAgainstBraces(t *testing.T) {
	t.Parallel()
	p := ratelimit.MustPolicy(ratelimit.Policy{Name: "otp", Algorithm: ratelimit.FixedWindow, Limit: 5, Window: time.Minute})
	slots := map[uint16]bool{}
	const n = 1000
	for i := range n {
		k := Key("sluice:", ratelimit.Request{Policy: p, Key: "}" + strconv.Itoa(i)})
		slots[Slot(k)] = true
	}
	// 1000 keys over 16384 slots land in about 970 distinct ones.
	if len(slots) < n*9/10 {
		t.Errorf("keys starting with } use %d slots, want at least %d", len(slots), n*9/10)
	}
	seen := map[string]string{}
	for _, k := range []string{"a}", "a%7D", "a%257D", "a%", "a%25", "a", "a}}", "%}", "}%"} {
		got := Key("sluice:", ratelimit.Request{Policy: p, Key: k})
		if other, dup := seen[got]; dup {
			t.Errorf("keys %q and %q share the Redis key %s", other, k, got)
		}
		seen[got] = k
	}
	plain := Key("sluice:", ratelimit.Request{Policy: p, Key: "abc"})
	if want := "sluice:{otp|abc}:"; plain[:len(want)] != want {
		t.Errorf("got %s, want prefix %s (keys without %% or } are unchanged)", plain, want)
	}
}

// TestKeyOfLeasedPolicy checks that a lease gets a key of its own while a
// per-request policy keeps the key it always had.
func TestKeyOfLeasedPolicy(t *testing.T) {
	per := ratelimit.MustPolicy(ratelimit.Policy{Name: "api", Algorithm: ratelimit.FixedWindow, Limit: 10, Window: time.Minute})
	leased := ratelimit.MustPolicy(ratelimit.Policy{Name: "api", Algorithm: ratelimit.FixedWindow, Limit: 10, Window: time.Minute, Sync: ratelimit.SyncLease})
	// The hash of the per-request settings, as before leases existed.
	const before = "sluice:{api|k}:1itvjhv"
	if got := Key("sluice:", ratelimit.Request{Policy: per, Key: "k"}); got != before {
		t.Errorf("per-request key: got %q, want %q", got, before)
	}
	if got := Key("sluice:", ratelimit.Request{Policy: leased, Key: "k"}); got == before {
		t.Errorf("leased key: got %q, the per-request one", got)
	}
}
