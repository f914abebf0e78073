package ratelimit

import (
	"context"
	"testing"
	"time"
)

func TestSeedComparison(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	want := map[Algorithm]int{FixedWindow: 200, SlidingWindowLog: 100, SlidingWindowCounter: 102}
	for alg, w := range want {
		p := MustPolicy(Policy{Name: "p", Algorithm: alg, Limit: 100, Window: time.Minute})
		s := NewMemoryStore(MemoryOptions{SweepInterval: -1})
		got := 0
		out := make([]Decision, 1)
		for _, at := range []time.Duration{58 * time.Second, 61 * time.Second} {
			for range 100 {
				s.Decide(context.Background(), t0.Add(at), []Request{{p, "k"}}, out)
				if out[0].Allowed {
					got++
				}
			}
		}
		if got != w {
			t.Errorf("%v: got %d, want %d", alg, got, w)
		}
	}
}
