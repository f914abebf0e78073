package ratelimit

import (
	"context"
	"testing"
	"time"
)

func TestHoldDepartures(t *testing.T) {
	t.Parallel()
	m := NewMemoryStore(MemoryOptions{SweepInterval: -1})
	defer m.Close()
	p := MustPolicy(Policy{Name: "lb", Algorithm: LeakyBucket, Limit: 10, Window: time.Second, Queue: 5})
	r := Request{Policy: p, Key: "k"}
	decide := func() Decision {
		out := make([]Decision, 1)
		m.Decide(context.Background(), t0, []Request{r}, out)
		return out[0]
	}
	m.HoldDepartures(r, t0.Add(250*time.Millisecond))
	if d := decide(); !d.Allowed || d.Delay != 250*time.Millisecond {
		t.Errorf("after a hold until +250ms: got %+v, want queued with Delay 250ms", d)
	}
	// A hold earlier than the schedule changes nothing.
	m.HoldDepartures(r, t0.Add(100*time.Millisecond))
	if d := decide(); d.Delay != 350*time.Millisecond {
		t.Errorf("after an earlier hold: got Delay %v, want 350ms", d.Delay)
	}
	tb := Request{Policy: MustPolicy(Policy{Name: "tb", Algorithm: TokenBucket, Limit: 1, Window: time.Hour}), Key: "k"}
	m.HoldDepartures(tb, t0.Add(time.Hour))
	if n := m.Len(); n != 1 {
		t.Errorf("a hold on a token_bucket: got %d buckets, want 1 (nothing made)", n)
	}
}
