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
// one rejects, leases are exact, and the conformance suite passes.
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

	t.Run("leases", func(t *testing.T) {
		// Two instances admit exactly the limit between them, and a
		// per-request limit in another slot is charged only for the
		// requests admitted.
		a := open(t, Options{CallerTime: true})
		b := open(t, Options{CallerTime: true})
		now := time.Unix(1_700_000_000, 0)
		leased := ratelimit.Request{Policy: leasePolicy(t, "cluster-lease", ratelimit.FixedWindow, 500, time.Hour), Key: "k"}
		other := ratelimit.Request{Policy: policyOf(t, "cluster-other", ratelimit.FixedWindow, 10_000, time.Hour), Key: "x"}
		admitted := 0
		for i := range 1000 {
			s := a
			if i%3 == 0 {
				s = b
			}
			reqs := []ratelimit.Request{leased, other}
			if ratelimit.Admitted(reqs, decide1(t, s, now.Add(time.Duration(i)*time.Millisecond), reqs...)) {
				admitted++
			}
		}
		if admitted != 500 {
			t.Errorf("admitted %d of 1000 across two instances, want 500", admitted)
		}
		d, err := a.Peek(context.Background(), now.Add(time.Second), other)
		if err != nil {
			t.Fatal(err)
		}
		if d.Remaining != 10_000-500 {
			t.Errorf("per-request limit beside the lease: remaining %d, want %d (only admitted requests charged)", d.Remaining, 10_000-500)
		}
	})

	t.Run("mirrors the memory store", func(t *testing.T) {
		runMirror(t, Options{Mode: Cluster, Addresses: addrs}, 3, 800)
	})

	t.Run("conformance", func(t *testing.T) {
		var n atomic.Int64
		ratelimittest.Run(t, func(t *testing.T) ratelimit.Store {
			s, err := New(t.Context(), Options{Mode: Cluster, Addresses: addrs, CallerTime: true, KeyPrefix: fmt.Sprintf("cc%d:", n.Add(1)), Timeout: testTimeout, Observe: failOnError(t)})
			if err != nil {
				t.Fatal(err)
			}
			return s
		})
	})
}

// TestCompensationOnlyUndoesItsOwnTake replays what a request spanning
// slots does when another slot rejects it: its take on a burst-1 token
// bucket is given back a round trip later. A request that took the bucket
// in between must keep it: giving back TAT - interval from whatever is
// stored then would let a third request in at the same instant.
func TestCompensationOnlyUndoesItsOwnTake(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, CallerTime: true, KeyPrefix: "comp:"})
	c := *s.client.Load()
	ctx := context.Background()
	p := policyOf(t, "burst1", ratelimit.TokenBucket, 1, time.Second)
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	decide := func(key string, at time.Time) ratelimit.Decision {
		var out [1]ratelimit.Decision
		if err := s.Decide(ctx, at, []ratelimit.Request{{Policy: p, Key: key}}, out[:]); err != nil {
			t.Fatal(err)
		}
		return out[0]
	}
	take := func(key string, at time.Time) *slotGroup {
		g := groupBySlot(s.prefix, []ratelimit.Request{{Policy: p, Key: key}})[0]
		g.token = s.token()
		if !s.runGroups(ctx, c, at, []*slotGroup{g}, modeTake) || !g.consumed {
			t.Fatalf("%s: the spanning request's take was rejected, want admitted", key)
		}
		return g
	}

	// Alone, the compensation gives the token back.
	g := take("alone", t0)
	s.compensate(ctx, c, t0, []*slotGroup{g})
	if d := decide("alone", t0); !d.Allowed {
		t.Errorf("after the compensation: got rejected, want the token back")
	}

	// With a request in between: it took the token that refilled at 1s.
	g = take("k", t0)
	if d := decide("k", t0.Add(time.Second)); !d.Allowed {
		t.Fatalf("request at 1s: got rejected, want allowed")
	}
	s.compensate(ctx, c, t0, []*slotGroup{g})
	if d := decide("k", t0.Add(time.Second)); d.Allowed {
		t.Errorf("second request at 1s after a late compensation: got allowed, want rejected (burst 1)")
	}
}

// TestCompensationGivesBackHeldToken replays a request spanning slots
// whose count_status token_bucket limit admitted it while another slot
// rejected it, with a request on the same bucket in between. A held token
// can be given back exactly whatever came between (it never refilled), so
// the compensation must leave the bucket as if the rejected request had
// never come: with only the other request's token spent, and no hold
// left to keep the bucket down.
func TestCompensationGivesBackHeldToken(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, CallerTime: true, KeyPrefix: "comphold:"})
	c := *s.client.Load()
	ctx := context.Background()
	p := ratelimit.MustPolicy(ratelimit.Policy{Name: "held", Algorithm: ratelimit.TokenBucket, Limit: 2, Window: 2 * time.Second, Hold: true})
	r := ratelimit.Request{Policy: p, Key: "k"}
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)

	g := groupBySlot(s.prefix, []ratelimit.Request{r})[0]
	g.token = s.token()
	if !s.runGroups(ctx, c, t0, []*slotGroup{g}, modeTake) || !g.consumed {
		t.Fatal("the spanning request's take was rejected, want admitted")
	}
	// Another request takes a token of the bucket, and its answer counts.
	other := decide1(t, s, t0, r)
	if !other[0].Allowed {
		t.Fatal("the other request: got rejected, want admitted")
	}
	if err := s.Keep(ctx, t0, []ratelimit.Request{r}, other); err != nil {
		t.Fatal(err)
	}
	s.compensate(ctx, c, t0, []*slotGroup{g})

	for _, tc := range []struct {
		at   time.Duration
		want int64
	}{
		{0, 1},                // the other request's token is spent
		{10 * time.Second, 2}, // and refilled; nothing holds the bucket down
	} {
		d, err := s.Peek(ctx, t0.Add(tc.at), r)
		if err != nil {
			t.Fatal(err)
		}
		if d.Remaining != tc.want {
			t.Errorf("at %v after the compensation: got Remaining %d, want %d", tc.at, d.Remaining, tc.want)
		}
	}
}
