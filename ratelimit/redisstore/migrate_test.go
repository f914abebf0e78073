package redisstore

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// TestMigratingSlotOpensNoBreaker: README "Cluster mode" and "When Redis
// fails". While resharding moves a slot, a script on a bucket of that
// slot whose other keys (a sliding log's settled time, a block, an
// identity) are not on the source node fails ("non local key", or
// TRYAGAIN). Redis answers every other bucket as usual, so those failures
// must not open the breaker: three in a row sent every decision of the
// gateway, on every slot, to on_error.
func TestMigratingSlotOpensNoBreaker(t *testing.T) {
	addrs := redistest.StartCluster(t, 3)
	s := newStore(t, Options{Mode: Cluster, Addresses: addrs, OnError: OnErrorDeny})
	hot := ratelimit.Request{Policy: policyOf(t, "migrating", ratelimit.SlidingWindowLog, 1000, time.Hour), Key: "k"}
	key := Key(s.prefix, hot)
	slot := fmt.Sprint(Slot(key))
	ids := make(map[string]string)
	var owner, target string
	for _, a := range addrs {
		id, err := redistest.Command(a, "CLUSTER", "MYID")
		if err != nil {
			t.Fatal(err)
		}
		ids[a] = id
		// The owner answers; the others redirect (MOVED).
		if _, err := redistest.Command(a, "GET", key); err == nil {
			owner = a
		} else {
			target = a
		}
	}
	other := ratelimit.Request{Policy: policyOf(t, "stable", ratelimit.FixedWindow, 1000, time.Hour)}
	for i := 0; other.Key == ""; i++ {
		if k := fmt.Sprint("o", i); Slot(Key(s.prefix, ratelimit.Request{Policy: other.Policy, Key: k})) != Slot(key) {
			other.Key = k
		}
	}
	now := time.Now()
	if d := decide1(t, s, now, hot); !d[0].Allowed {
		t.Fatalf("before the migration: got %+v, want allowed", d[0])
	}
	for _, c := range [][]string{
		{target, "CLUSTER", "SETSLOT", slot, "IMPORTING", ids[owner]},
		{owner, "CLUSTER", "SETSLOT", slot, "MIGRATING", ids[target]},
	} {
		if _, err := redistest.Command(c[0], c[1:]...); err != nil {
			t.Fatalf("%v: %v", c[1:], err)
		}
	}
	for range 5 {
		decide1(t, s, now, hot) // fails in Redis, decided by on_error
	}
	if d := decide1(t, s, now, other); !d[0].Allowed {
		t.Errorf("a bucket of another slot while one slot migrates: got %+v (breaker open %v, last error %v), want allowed by Redis", d[0], s.br.open.Load(), s.LastError())
	}
}
