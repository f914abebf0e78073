package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// TestLeasedDecisionBesideHungFirstBeat: README "When Redis fails": "Each
// decision has timeout for its round trips; no request waits longer on
// Redis". A leased decision that comes while the heartbeat's first beat
// is on its way (a load that declared leases just now) waits for that
// beat, so that its batch is sized for the instances there are; against
// a Redis that stopped answering, the beat has its own, looser bound
// (100ms at least), which the decision must not wait out.
func TestLeasedDecisionBesideHungFirstBeat(t *testing.T) {
	srv := redistest.Start(t)
	const timeout = 10 * time.Millisecond
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: timeout})
	if _, ok := waitFor(10*time.Second, func() bool { return s.ping(time.Second) == nil }); !ok {
		t.Fatalf("redis does not answer: %v", s.LastError())
	}
	p := leasePolicy(t, "lease-hung-beat", ratelimit.FixedWindow, 300, time.Hour)
	reqs := []ratelimit.Request{{Policy: p, Key: "k"}}
	srv.Pause()
	defer srv.Resume()
	// The load declares leases: the first beat starts in the background
	// and hangs with Redis.
	s.DeclareLeases()
	// A deadline of the timeout, as the decision's, measures how late
	// the loaded machine wakes it.
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	woke := make(chan time.Duration, 1)
	go func() { <-ctx.Done(); woke <- time.Since(start) }()
	_, took := decideTimed(t, s, reqs)
	if late := <-woke; took > timeout+40*time.Millisecond && took > late+40*time.Millisecond {
		t.Errorf("leased decision beside a first beat on a hung Redis took %v, want about the %v timeout (a timer of it woke after %v)", took, timeout, late)
	}
}
