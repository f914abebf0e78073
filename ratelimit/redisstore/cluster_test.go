package redisstore

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/ratelimit/ratelimittest"
)

// TestCluster runs against a three-master cluster: single limits are exact
// across instances, a request whose limits span slots consumes nothing when
// one rejects, and the conformance suite passes.
func TestCluster(t *testing.T) {
	addrs := redistest.StartCluster(t, 3)
	open := func(t testing.TB, o Options) *Store {
		o.Mode, o.Addresses = Cluster, addrs
		return newStore(t, o)
	}

	t.Run("exact across instances", func(t *testing.T) {
		stores := []*Store{open(t, Options{}), open(t, Options{}), open(t, Options{})}
		p := policyOf(t, "cluster-exact", ratelimit.SlidingWindowLog, 100, time.Hour)
		if got := admitAcross(t, stores, ratelimit.Request{Policy: p, Key: "k"}, 300); got != 100 {
			t.Errorf("got %d admitted, want 100", got)
		}
		if !stores[0].Healthy() {
			t.Errorf("unhealthy: %v", stores[0].LastError())
		}
	})

	t.Run("limits in different slots", func(t *testing.T) {
		var trips atomic.Int64
		s := open(t, Options{Observe: func(time.Duration, error) { trips.Add(1) }})
		wide := policyOf(t, "cluster-wide", ratelimit.FixedWindow, 1000, time.Hour)
		gate := policyOf(t, "cluster-gate", ratelimit.TokenBucket, 1, time.Hour)
		shape := ratelimit.MustPolicy(ratelimit.Policy{Name: "cluster-shape", Algorithm: ratelimit.LeakyBucket, Limit: 1, Window: time.Hour, Queue: 5})
		reqs := []ratelimit.Request{{Policy: wide, Key: "a"}, {Policy: gate, Key: "b"}, {Policy: shape, Key: "c"}}
		slots := map[uint16]bool{}
		for _, r := range reqs {
			slots[Slot(Key("sluice:", r))] = true
		}
		if len(slots) != 3 {
			t.Fatalf("test keys share slots %v; pick other keys", slots)
		}
		out := make([]ratelimit.Decision, len(reqs))
		admitted := 0
		for range 5 {
			if err := s.Decide(context.Background(), time.Now(), reqs, out); err != nil {
				t.Fatal(err)
			}
			if ratelimit.Admitted(reqs, out) {
				admitted++
			}
		}
		if admitted != 1 {
			t.Errorf("got %d admitted, want 1 (the gate's burst)", admitted)
		}
		if !out[0].Allowed || out[1].Allowed {
			t.Errorf("last request: got wide %+v gate %+v, want wide allowed, gate rejected", out[0], out[1])
		}
		// Four rejected requests gave back what wide took; the queue was
		// never touched for them.
		d, err := s.Peek(context.Background(), time.Now(), reqs[0])
		if err != nil {
			t.Fatal(err)
		}
		if d.Remaining != 999 {
			t.Errorf("wide after 1 admitted, 4 rejected: got Remaining %d, want 999", d.Remaining)
		}
		if d, err = s.Peek(context.Background(), time.Now(), reqs[2]); err != nil {
			t.Fatal(err)
		}
		if d.Remaining != 5 {
			t.Errorf("shape after 1 admitted: got Remaining %d, want 5 (one place taken by the request leaving)", d.Remaining)
		}
		// Admitted: two groups in parallel, then the queue. Rejected: two
		// groups, then the compensation and a look at the queue.
		// The idle prober may add one ping.
		if got, want := trips.Load(), int64(3+4*4+2); got != want && got != want+1 {
			t.Errorf("got %d round trips, want %d", got, want)
		}
	})

	t.Run("mirrors the memory store", func(t *testing.T) {
		runMirror(t, Options{Mode: Cluster, Addresses: addrs}, 3, 800)
	})

	t.Run("conformance", func(t *testing.T) {
		var n atomic.Int64
		ratelimittest.Run(t, func(t *testing.T) ratelimit.Store {
			s, err := New(t.Context(), Options{Mode: Cluster, Addresses: addrs, CallerTime: true, KeyPrefix: fmt.Sprintf("cc%d:", n.Add(1)), Timeout: testTimeout})
			if err != nil {
				t.Fatal(err)
			}
			return s
		})
	})
}
