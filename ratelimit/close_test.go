package ratelimit

import (
	"context"
	"testing"
	"time"
)

// TestMemoryAfterClose: the gateway closes its stores at the end of a
// shutdown, and a request its shutdown_timeout cut off may still be in
// its handler then. Close only stops the sweeper: a decision, a wait in a
// leaky_bucket queue, a refund and a keep after it are answered as
// before, for every algorithm, and a request queued before Close leaves
// at its departure.
func TestMemoryAfterClose(t *testing.T) {
	t.Parallel()
	for _, a := range Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			t.Parallel()
			p := Policy{Name: a.String(), Algorithm: a, Limit: 20, Window: time.Second, Hold: true}
			if a == LeakyBucket {
				p.Queue, p.Hold = 5, false // count_status is not allowed on leaky_bucket
			}
			pol := MustPolicy(p)
			m := NewMemoryStore(MemoryOptions{})
			reqs := []Request{{Policy: pol, Key: "k"}}
			// Errorf, not Fatalf: it also runs on the goroutine below.
			decide := func(what string) Decision {
				t.Helper()
				out := make([]Decision, 1)
				if err := m.Decide(context.Background(), m.clock(), reqs, out); err != nil {
					t.Errorf("%s: Decide: %v", what, err)
				} else if !out[0].Allowed {
					t.Errorf("%s: got rejected far below the limit", what)
				}
				return out[0]
			}
			decide("before Close")
			queued := decide("before Close")
			waited := make(chan error, 1)
			if a == LeakyBucket {
				if queued.Delay <= 0 {
					t.Fatalf("the second request got no delay: the test proves nothing")
				}
				go func() { waited <- m.Wait(context.Background(), reqs[0], queued) }()
				waitFor(t, m, reqs[0], 1)
			}
			if err := m.Close(); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				d := decide("after Close")
				if a == LeakyBucket {
					if err := <-waited; err != nil {
						t.Errorf("a request queued before Close: Wait got %v, want nil at its departure", err)
					}
					if err := m.Wait(context.Background(), reqs[0], d); err != nil {
						t.Errorf("Wait after Close: got %v, want nil", err)
					}
					gone := decide("after Close")
					ctx, cancel := context.WithCancel(context.Background())
					cancel()
					if err := m.Wait(ctx, reqs[0], gone); err != context.Canceled {
						t.Errorf("Wait after Close, its client gone: got %v, want %v", err, context.Canceled)
					}
					if n := len(waiting(m, reqs[0])); n != 0 {
						t.Errorf("got %d waiters left, want 0", n)
					}
					return
				}
				if err := m.Refund(context.Background(), m.clock(), reqs, []Decision{d}); err != nil {
					t.Errorf("Refund after Close: %v", err)
				}
				if err := m.Keep(context.Background(), m.clock(), reqs, []Decision{queued}); err != nil {
					t.Errorf("Keep after Close: %v", err)
				}
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the calls after Close had not returned within 10s")
			}
		})
	}
}
