package redisstore

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// syncBuffer is a bytes.Buffer safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) count(s string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Count(b.b.String(), s)
}

// TestLeaseFallbackAndResume kills Redis under a leased policy seen by
// three instances: the instance spends what its lease held, falls back to
// limit / 3 at once, says so once in the log and through OnLeaseFallback,
// decides without waiting on the dead server, and leases again once Redis
// is back.
//
// The timeout is one any answered round trip meets on a loaded machine: a
// healthy decision that missed it would be decided by the fallback before
// the kill, and a heartbeat that missed it would leave N at 1. With Redis
// killed, calls are refused at once, and decideWithin still bounds each
// decision by faultTimeout plus slack.
func TestLeaseFallbackAndResume(t *testing.T) {
	srv := redistest.Start(t)
	var logs syncBuffer
	var mu sync.Mutex
	var states []bool
	var c trips
	s := newStore(t, Options{
		Addresses: []string{srv.Addr()}, Timeout: time.Second, Observe: c.observe,
		Logger:          slog.New(slog.NewTextHandler(&logs, nil)),
		OnLeaseFallback: func(_ string, on bool) { mu.Lock(); states = append(states, on); mu.Unlock() },
	})
	others := []*Store{
		newStore(t, Options{Addresses: []string{srv.Addr()}}),
		newStore(t, Options{Addresses: []string{srv.Addr()}}),
	}
	for _, o := range others {
		o.startHeartbeat()
	}
	p := leasePolicy(t, "fault-lease", ratelimit.FixedWindow, 300, time.Hour)
	reqs := []ratelimit.Request{{Policy: p, Key: "k"}}
	for range 60 {
		if d, _ := decideTimed(t, s, reqs); !d[0].Allowed {
			t.Fatal("healthy: rejected, want admitted")
		}
	}
	// Each store beats once a second; a beat the machine held up is
	// followed by the next.
	if _, ok := waitFor(10*time.Second, func() bool { return s.Instances() == 3 }); !ok {
		t.Fatalf("instances seen: got %d, want 3", s.Instances())
	}
	s.refills.Wait()
	l := s.leases.get(Key(s.prefix, reqs[0]), reqs[0])
	l.mu.Lock()
	held := l.units
	l.mu.Unlock()
	if held == 0 {
		t.Fatal("the lease holds nothing before the kill, want some units")
	}

	srv.Kill()
	failedBefore, down := c.failed.Load(), time.Now()
	fromLease, fromFallback := 0, 0
	for i := range 150 + int(held) {
		d := decideWithin(t, s, reqs, fmt.Sprintf("decision %d with Redis down", i))
		switch {
		case !d[0].Allowed:
		case d[0].Ticket.Store == leaseTicket:
			fromLease++
		default:
			fromFallback++
		}
	}
	// The units the lease held were counted in Redis: they are spent
	// first, and never more of them than it held. Once the breaker is
	// open a decision goes to the fallback without looking at the lease,
	// so a failure before the refills' (a heartbeat that came due just
	// then) leaves a unit or two for when Redis is back: fewer admitted,
	// never more. The fallback then admits limit / 3, exactly.
	if fromLease > int(held) || fromLease == 0 {
		t.Errorf("Redis down: admitted %d from the lease, want 1 to the %d it held", fromLease, held)
	}
	if fromFallback != 100 {
		t.Errorf("Redis down: the fallback admitted %d, want limit / 3 = 100", fromFallback)
	}
	// Three failures open the breaker; then only the prober tries, at
	// most once per breakerMinBackoff (its backoff grows from there), for
	// as long as the machine took over the decisions.
	pings := int64(time.Since(down)/breakerMinBackoff) + 1
	if got := c.failed.Load() - failedBefore; got < breakerFailures || got > breakerFailures+pings {
		t.Errorf("Redis down: got %d failed round trips, want %d (breaker open) and at most %d pings", got, breakerFailures, pings)
	}
	if got := logs.count("lease fallback"); got != 1 {
		t.Errorf(`"lease fallback" log lines: got %d, want 1`, got)
	}
	if got := logs.count("instances=3 limit=100"); got != 1 {
		t.Errorf("fallback line lacks instances=3 limit=100:\n%s", logs.b.String())
	}

	srv.Restart()
	// Leases resume once the prober has seen Redis (within
	// breakerMaxBackoff) and the policy has decided nothing locally for
	// resumeQuiet: about 2s, which a loaded machine stretches. Only a
	// fallback that never ends fails here.
	took, ok := waitFor(10*time.Second, func() bool {
		decideTimed(t, s, reqs)
		return logs.count("lease resumed") == 1
	})
	if !ok {
		t.Fatalf("Redis back: leases not resumed after %v, want resumed", took)
	}
	t.Logf("Redis back: leases resumed after %v", took)
	mu.Lock()
	defer mu.Unlock()
	if len(states) != 2 || !states[0] || states[1] {
		t.Errorf("OnLeaseFallback calls: got %v, want [true false]", states)
	}
	if got := srv.Do("EXISTS", Key(s.prefix, reqs[0])); got != "1" {
		t.Errorf("Redis back: leased bucket exists %s, want 1", got)
	}
}
