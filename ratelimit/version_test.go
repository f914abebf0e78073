package ratelimit

import (
	"context"
	"testing"
	"time"
)

// TestOlderVersionKeepsCallersHold: Hold is not part of Settings, so a
// reload that adds count_status to a token_bucket keeps its buckets. A
// request routed before it (its route has no count_status, so it never
// calls Keep or Refund) but decided after must not be decided with the
// newest policy's Hold: the memory store's holds never run out, and the
// bucket would stay a token short, and pinned, for good.
func TestOlderVersionKeepsCallersHold(t *testing.T) {
	t.Parallel()
	m := NewMemoryStore(MemoryOptions{SweepInterval: -1})
	defer m.Close()
	old := MustPolicy(Policy{Name: "login", Algorithm: TokenBucket, Limit: 2, Window: time.Minute, Version: 1})
	cur := MustPolicy(Policy{Name: "login", Algorithm: TokenBucket, Limit: 2, Window: time.Minute, Hold: true, Version: 2})
	at := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	decide := func(p *Policy) Decision {
		out := make([]Decision, 1)
		if err := m.Decide(context.Background(), at, []Request{{Policy: p, Key: "u"}}, out); err != nil {
			t.Fatal(err)
		}
		return out[0]
	}
	d := decide(cur) // the new configuration's first request, settled
	if err := m.Keep(context.Background(), at, []Request{{Policy: cur, Key: "u"}}, []Decision{d}); err != nil {
		t.Fatal(err)
	}
	if d := decide(old); d.Ticket.Hold != 0 {
		// Its caller, whose policy does not hold, will never end it.
		t.Errorf("a request of a policy without Hold: got a held unit (Ticket.Hold %d), want none", d.Ticket.Hold)
	}
	at = at.Add(24 * time.Hour)
	if d, _ := m.Peek(context.Background(), at, Request{Policy: cur, Key: "u"}); d.Remaining != 2 {
		t.Errorf("a day later: got remaining %d, want the whole burst, 2", d.Remaining)
	}
}
