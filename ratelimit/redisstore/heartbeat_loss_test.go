package redisstore

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestInstancesThroughRedisDataLoss: README "Leases": N is "the
// instances seen alive", and one that dies leaves the others' N 3 to 4
// seconds after its last beat. A Redis that loses its data (a restart
// without persistence, FLUSHALL, a failover to a replica behind) loses
// the set of heartbeats too, while every instance is alive: the first to
// beat again must not count itself alone, which would let its leases
// grow to the whole fleet's share and, were Redis to fail just then, its
// fallback decide with the whole limit instead of limit / N.
func TestInstancesThroughRedisDataLoss(t *testing.T) {
	srv := redistest.Start(t)
	f := newLeaseFleet(t, srv, 3)
	srv.Do("FLUSHALL")
	low := 3
	for start := time.Now(); time.Since(start) < 2500*time.Millisecond; time.Sleep(5 * time.Millisecond) {
		for _, s := range f.stores {
			low = min(low, s.Instances())
		}
	}
	if low != 3 {
		t.Errorf("after the heartbeats' set was lost, an instance counted %d, want 3 throughout", low)
	}
	if got := srv.Do("ZCARD", InstancesKey(f.stores[0].prefix)); got != "3" {
		t.Errorf("heartbeats after the loss: %s members, want 3", got)
	}
}
