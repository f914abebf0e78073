package ratelimit

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestLateRequestAfterIdleRemoval decides a sliding_window_log request
// late: at a time before that of a sweep, or of a decision that made room,
// which removed its bucket as idle. The bucket that stayed would refuse
// it, its window holding the limit (or the time falling within its block);
// the one made again must too, whether the late request makes it or a
// request in order made it first.
func TestLateRequestAfterIdleRemoval(t *testing.T) {
	t.Parallel()
	for _, remover := range []string{"sweep", "eviction"} {
		for _, block := range []time.Duration{0, 20 * time.Second} {
			for _, remade := range []bool{false, true} {
				name := remover + "/block=" + block.String()
				if remade {
					name += "/made again first"
				}
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					p := MustPolicy(Policy{Name: "otp", Algorithm: SlidingWindowLog, Limit: 5, Window: 10 * time.Second, Block: block, MaxKeys: 1})
					m := NewMemoryStore(MemoryOptions{SweepInterval: -1})
					defer m.Close()
					for i := range 5 { // at +4.0s to +4.4s
						admitOne(t, m, t0.Add(4*time.Second+time.Duration(i)*100*time.Millisecond), p, "victim")
					}
					last := t0.Add(4400 * time.Millisecond)
					if block > 0 {
						// Rejected: blocked to +24.4s.
						if d := decideOne(t, m, last, p, "victim"); d.Allowed {
							t.Fatal("6th: got allowed, want rejected")
						}
					}
					// Idle from +14.4s (+24.4s with the block): removed at
					// +14.5s (+24.5s).
					removal := last.Add(max(p.Window, block) + 100*time.Millisecond)
					if remover == "sweep" {
						m.Sweep(removal)
					} else {
						decideOne(t, m, removal, p, "newcomer")
					}
					if tracked(m, p, "victim") {
						t.Fatal("victim: got kept, want removed as idle (the case under test)")
					}
					// In order, the bucket is fresh.
					inOrder := func() {
						t.Helper()
						if d := decideOne(t, m, removal, p, "victim"); !d.Allowed {
							t.Fatalf("decided at +%v: got rejected (retry %v), want allowed", removal.Sub(t0), d.RetryAfter)
						}
					}
					if remade {
						inOrder()
					}
					// Decided late, at +13.9s: (+3.9s, +13.9s] holds five.
					late := t0.Add(13900 * time.Millisecond)
					if block > 0 {
						late = t0.Add(24 * time.Second) // within the block
					}
					if d := decideOne(t, m, late, p, "victim"); d.Allowed {
						t.Errorf("decided at +%v after removal at +%v: got allowed, want rejected", late.Sub(t0), removal.Sub(t0))
					}
					if !remade {
						inOrder()
					}
				})
			}
		}
	}
}

// TestSlidingLogExactWithLateRequests decides sliding_window_log requests
// on a few keys at times that run forward but are sometimes late by up to
// a window, while sweeps at the latest time yet and new keys on a policy
// at its bound remove idle buckets: in every half-open interval of a
// window, each key has at most limit requests admitted.
func TestSlidingLogExactWithLateRequests(t *testing.T) {
	t.Parallel()
	const limit, window = 3, int64(time.Second)
	p := MustPolicy(Policy{Name: "log", Algorithm: SlidingWindowLog, Limit: limit, Window: time.Second, MaxKeys: 4})
	m := NewMemoryStore(MemoryOptions{SweepInterval: -1})
	defer m.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	admitted := map[string][]int64{}
	clock := t0.UnixNano()
	for i := range 20000 {
		clock += rng.Int64N(window / 2)
		switch rng.IntN(8) {
		case 0:
			m.Sweep(time.Unix(0, clock))
			continue
		case 1:
			decideOne(t, m, time.Unix(0, clock), p, "new-"+strconv.Itoa(i))
			continue
		}
		now := clock
		if rng.IntN(3) == 0 {
			now -= rng.Int64N(window)
		}
		k := "k" + strconv.Itoa(rng.IntN(3))
		if decideOne(t, m, time.Unix(0, now), p, k).Allowed {
			admitted[k] = append(admitted[k], now)
		}
	}
	for k, times := range admitted {
		slices.Sort(times)
		for i := limit; i < len(times); i++ {
			if times[i]-times[i-limit] < window {
				t.Fatalf("%s: got %d admitted in (%d, %d], want at most %d", k, limit+1, times[i]-window, times[i], limit)
			}
		}
	}
}
