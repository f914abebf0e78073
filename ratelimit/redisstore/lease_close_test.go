package redisstore

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// TestLeaseNoTrimAfterClose: a leased decision starts the heartbeat on
// its own goroutine, which Close does not wait for, and the first beat
// may find the fleet grown: it then starts a trim of each lease holding
// past its share. A beat whose reply comes while Close runs, once Close
// has waited for the refills, must start none: it would be a goroutine,
// and a Redis call, that outlive Close. Here the first beat's reply is
// held until Close has waited.
func TestLeaseNoTrimAfterClose(t *testing.T) {
	srv := redistest.Start(t)
	// Nine other instances, alive for the first beat.
	for range 9 {
		o := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: time.Second})
		o.beat(false)
	}
	var armed atomic.Bool
	replied, release := make(chan struct{}), make(chan struct{})
	s, err := New(t.Context(), Options{Addresses: []string{srv.Addr()}, CallerTime: true, Timeout: time.Second,
		Observe: func(time.Duration, error) {
			if armed.CompareAndSwap(true, false) {
				close(replied)
				<-release
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := waitFor(10*time.Second, s.Healthy); !ok {
		t.Fatalf("new store not healthy after 10s: %v", s.LastError())
	}
	s.RetireLeases() // no heartbeat yet: the lease grows as for N = 1
	s.seen.Store(0)
	r := ratelimit.Request{Policy: leasePolicy(t, "close-trim", ratelimit.FixedWindow, 1000, time.Hour), Key: "k"}
	t0 := time.Unix(1_700_000_000, 0)
	l := growLease(t, s, r, func(i int) time.Time { return t0.Add(time.Duration(i) * time.Millisecond) })
	share := maxBatch(r.Policy, 10)
	l.mu.Lock()
	units := l.units
	l.lastUse = time.Now().Add(time.Hour) // never idle: the sweep leaves it
	l.mu.Unlock()
	if units <= share {
		t.Fatalf("the lease holds %d, want more than its share among 10, %d: the test proves nothing", units, share)
	}
	// A leased decision starts the heartbeat, as takeLease does; its
	// first beat's reply is held.
	s.hb.Lock()
	s.retired = false
	s.hb.Unlock()
	// Only the beat's reply is observed while armed: the prober does
	// not ping (it does while no call succeeded for a second), and the
	// sweep leaves the lease.
	s.br.lastOK.Store(time.Now().Add(time.Hour).UnixNano())
	armed.Store(true)
	started := make(chan struct{})
	go func() {
		defer close(started)
		s.startHeartbeat()
	}()
	<-replied
	var trimmed bool
	s.closeWaited = func() {
		// Close has waited for the refills: the beat goes on.
		close(release)
		<-started
		l.mu.Lock()
		trimmed = l.inflight != nil || l.units <= share
		l.mu.Unlock()
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := s.Instances(); got != 10 {
		t.Fatalf("the first beat saw %d instances, want 10: the test proves nothing", got)
	}
	if trimmed {
		t.Error("a trim started after Close had waited for the refills: its goroutine and Redis call outlive Close")
	}
	s.refills.Wait() // whatever started, before the leak check
}

// TestLeaseDecideAfterClose: Close gives every lease back and marks it
// gone, but leaves it in the table. A request still in flight when the
// gateway's shutdown timeout ran out may decide after that; it must get
// an answer (an error, or the fallback's) within its context, not find
// the same gone lease again and again.
func TestLeaseDecideAfterClose(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, CallerTime: true})
	r := ratelimit.Request{Policy: leasePolicy(t, "after-close", ratelimit.FixedWindow, 1000, time.Hour), Key: "k"}
	now := time.Unix(1_700_000_000, 0)
	decide1(t, s, now, r)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		out := make([]ratelimit.Decision, 1)
		done <- s.Decide(ctx, now.Add(time.Millisecond), []ratelimit.Request{r}, out)
	}()
	select {
	case err := <-done:
		t.Logf("Decide after Close: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Decide after Close had not returned 10 s later, 8 s past its context's end")
	}
}
