package ratelimit

import (
	"context"
	"testing"
	"time"
)

// TestMemoryObserve checks that Observe sees each Decide once, timed with
// the store's clock, and nothing else.
func TestMemoryObserve(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	calls := 0
	clock := func() time.Time { calls++; return t0.Add(time.Duration(calls) * time.Millisecond) }
	var got []time.Duration
	m := NewMemoryStore(MemoryOptions{SweepInterval: -1, Clock: clock, Observe: func(d time.Duration, err error) {
		if err != nil {
			t.Errorf("Observe: got error %v, want nil", err)
		}
		got = append(got, d)
	}})
	defer m.Close()
	p := MustPolicy(Policy{Name: "fw", Algorithm: FixedWindow, Limit: 5, Window: time.Hour})
	reqs := []Request{{Policy: p, Key: "k"}}
	out := make([]Decision, 1)
	for i := range 3 {
		if err := m.Decide(context.Background(), t0.Add(time.Duration(i)*time.Second), reqs, out); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Peek(context.Background(), t0, reqs[0]); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("Observe calls: got %d, want 3 (one per Decide, none for Peek)", len(got))
	}
	for i, d := range got {
		if d != time.Millisecond {
			t.Errorf("Observe[%d]: got %v, want 1ms (two reads of the clock)", i, d)
		}
	}
}
