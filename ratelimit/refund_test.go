package ratelimit

import (
	"context"
	"testing"
	"time"
)

func TestRefundSteps(t *testing.T) {
	t.Parallel()
	w := int64(10 * time.Second)
	swc := MustPolicy(Policy{Name: "swc", Algorithm: SlidingWindowCounter, Limit: 5, Window: 10 * time.Second})
	tb := MustPolicy(Policy{Name: "tb", Algorithm: TokenBucket, Limit: 5, Window: 10 * time.Second}) // interval 2s
	start := t0.UnixNano()
	sec := int64(time.Second)

	fwCases := []struct {
		name  string
		s     FixedWindowState
		taken int64
		want  FixedWindowState
	}{
		{"its window", FixedWindowState{start, 3}, start, FixedWindowState{start, 2}},
		{"a later window", FixedWindowState{start + w, 3}, start, FixedWindowState{start + w, 3}},
		{"empty", FixedWindowState{start, 0}, start, FixedWindowState{start, 0}},
	}
	for _, tc := range fwCases {
		t.Run("fixed_window/"+tc.name, func(t *testing.T) {
			t.Parallel()
			if got := RefundFixedWindow(tc.s, tc.taken); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}

	swcCases := []struct {
		name  string
		s     SlidingWindowCounterState
		taken int64
		want  SlidingWindowCounterState
	}{
		{"current window", SlidingWindowCounterState{start, 3, 4}, start, SlidingWindowCounterState{start, 2, 4}},
		{"previous window", SlidingWindowCounterState{start + w, 3, 4}, start, SlidingWindowCounterState{start + w, 3, 3}},
		{"aged out", SlidingWindowCounterState{start + 2*w, 3, 4}, start, SlidingWindowCounterState{start + 2*w, 3, 4}},
		{"empty current", SlidingWindowCounterState{start, 0, 4}, start, SlidingWindowCounterState{start, 0, 4}},
	}
	for _, tc := range swcCases {
		t.Run("sliding_window_counter/"+tc.name, func(t *testing.T) {
			t.Parallel()
			if got := RefundSlidingWindowCounter(swc, tc.s, tc.taken); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}

	tbCases := []struct {
		name string
		tat  int64
		now  int64
		want int64
	}{
		{"drained", start + 6*sec, start, start + 4*sec},
		{"less than a token spent", start + sec, start, start},
		{"full", start - sec, start, start - sec},
	}
	for _, tc := range tbCases {
		t.Run("token_bucket/"+tc.name, func(t *testing.T) {
			t.Parallel()
			if got := RefundTokenBucket(tb, TokenBucketState{TAT: tc.tat}, tc.now).TAT; got != tc.want {
				t.Errorf("got TAT %v, want %v", time.Duration(got-start), time.Duration(tc.want-start))
			}
		})
	}

	held := MustPolicy(Policy{Name: "held", Algorithm: TokenBucket, Limit: 5, Window: 10 * time.Second, Hold: true})
	settleCases := []struct {
		name   string
		s      TokenBucketState
		now    int64
		refund bool
		want   TokenBucketState
	}{
		// One held token, taken at start from a full bucket (TAT start+2s).
		{"refund at once", TokenBucketState{start + 2*sec, 1}, start, true, TokenBucketState{start, 0}},
		{"keep at once", TokenBucketState{start + 2*sec, 1}, start, false, TokenBucketState{start + 2*sec, 0}},
		// Held 5s: it did not refill, so a keep starts its refill now and
		// a refund leaves the bucket full.
		{"refund after 5s", TokenBucketState{start + 2*sec, 1}, start + 5*sec, true, TokenBucketState{start + 5*sec, 0}},
		{"keep after 5s", TokenBucketState{start + 2*sec, 1}, start + 5*sec, false, TokenBucketState{start + 7*sec, 0}},
		// Two held and one spent 4s of refill ago (TAT start+6s): the
		// refill stays below the held ones.
		{"refund beside another hold", TokenBucketState{start + 6*sec, 2}, start + 4*sec, true, TokenBucketState{start + 6*sec, 1}},
		{"keep beside another hold", TokenBucketState{start + 6*sec, 2}, start + 4*sec, false, TokenBucketState{start + 8*sec, 1}},
		{"refund with spent tokens left", TokenBucketState{start + 10*sec, 1}, start + sec, true, TokenBucketState{start + 8*sec, 0}},
		{"nothing held", TokenBucketState{start + 2*sec, 0}, start, true, TokenBucketState{start + 2*sec, 0}},
	}
	for _, tc := range settleCases {
		t.Run("settle token_bucket/"+tc.name, func(t *testing.T) {
			t.Parallel()
			if got := SettleTokenBucket(held, tc.s, tc.now, tc.refund); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	t.Run("step token_bucket/held tokens do not refill", func(t *testing.T) {
		t.Parallel()
		// Taken at start and held: 10s later a plain bucket is full
		// again, a held one still lacks the token.
		s, d := StepTokenBucket(held, TokenBucketState{}, start, 1)
		if !d.Allowed || s != (TokenBucketState{start + 2*sec, 1}) {
			t.Fatalf("take: got %+v %+v, want admitted with TAT +2s and one held", s, d)
		}
		if _, d = StepTokenBucket(held, s, start+10*sec, 0); d.Remaining != 4 || d.Reset != 2*time.Second {
			t.Errorf("held for 10s: got remaining %d reset %v, want 4 and 2s", d.Remaining, d.Reset)
		}
		if _, d = StepTokenBucket(tb, TokenBucketState{TAT: s.TAT}, start+10*sec, 0); d.Remaining != 5 {
			t.Errorf("not held: got remaining %d, want 5", d.Remaining)
		}
	})

	logCases := []struct {
		name  string
		log   []int64 // offsets in seconds
		taken int64
		want  []int64
	}{
		{"oldest", []int64{1, 2, 3}, 1, []int64{2, 3}},
		{"middle", []int64{1, 2, 3}, 2, []int64{1, 3}},
		{"newest", []int64{1, 2, 3}, 3, []int64{1, 2}},
		{"one of equals", []int64{1, 2, 2, 3}, 2, []int64{1, 2, 3}},
		{"gone", []int64{2, 3}, 1, []int64{2, 3}},
		{"only", []int64{5}, 5, nil},
	}
	for _, tc := range logCases {
		t.Run("sliding_window_log/"+tc.name, func(t *testing.T) {
			t.Parallel()
			var l SlidingLogState
			// Start the ring off its first slot, so removal wraps.
			l.push(0, 8)
			l.push(0, 8)
			l.drop(0, w)
			for _, at := range tc.log {
				l.push(start+at*sec, 8)
			}
			RefundSlidingWindowLog(&l, start+tc.taken*sec)
			var got []int64
			for i := range l.n {
				got = append(got, (l.at(i)-start)/sec)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got log %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("got log %v, want %v", got, tc.want)
				}
			}
		})
	}
}

func TestBlockSteps(t *testing.T) {
	t.Parallel()
	p := MustPolicy(Policy{Name: "b", Algorithm: FixedWindow, Limit: 5, Window: 10 * time.Second, Block: time.Minute})
	now := t0.UnixNano()
	cases := []struct {
		name      string
		p         *Policy
		d         Decision
		wantUntil int64
		want      Decision
	}{
		{"rejection starts it", p, Decision{Limit: 5, RetryAfter: 3 * time.Second, Reset: 3 * time.Second},
			now + int64(time.Minute), Decision{Limit: 5, RetryAfter: time.Minute, Reset: time.Minute}},
		{"budget later than block", p, Decision{Limit: 5, RetryAfter: 2 * time.Minute, Reset: 3 * time.Minute},
			now + int64(time.Minute), Decision{Limit: 5, RetryAfter: 2 * time.Minute, Reset: 3 * time.Minute}},
		{"admitted", p, Decision{Allowed: true, Limit: 5}, 0, Decision{Allowed: true, Limit: 5}},
		{"no block", MustPolicy(Policy{Name: "n", Algorithm: FixedWindow, Limit: 5, Window: time.Second}),
			Decision{Limit: 5, RetryAfter: time.Second}, 0, Decision{Limit: 5, RetryAfter: time.Second}},
		{"shadow", MustPolicy(Policy{Name: "s", Algorithm: FixedWindow, Limit: 5, Window: time.Second, Block: time.Minute, Shadow: true}),
			Decision{Limit: 5, RetryAfter: time.Second}, 0, Decision{Limit: 5, RetryAfter: time.Second}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			until, d := StartBlock(tc.p, now, tc.d)
			if until != tc.wantUntil || d != tc.want {
				t.Errorf("got %d, %+v; want %d, %+v", until, d, tc.wantUntil, tc.want)
			}
		})
	}
	want := Decision{Limit: 5, Blocked: true, RetryAfter: 20 * time.Second, Reset: 20 * time.Second}
	if got := BlockedDecision(p, now+int64(time.Minute), now+int64(40*time.Second)); got != want {
		t.Errorf("BlockedDecision: got %+v, want %+v", got, want)
	}
}

// TestSweepKeepsBlockedBucket checks that a blocked bucket, whose budget
// is whole again, is not idle until its block ends.
func TestSweepKeepsBlockedBucket(t *testing.T) {
	t.Parallel()
	m := NewMemoryStore(MemoryOptions{SweepInterval: -1})
	defer m.Close()
	p := MustPolicy(Policy{Name: "b", Algorithm: FixedWindow, Limit: 1, Window: time.Second, Block: time.Hour})
	r := []Request{{Policy: p, Key: "k"}}
	out := make([]Decision, 1)
	for range 2 {
		if err := m.Decide(context.Background(), t0, r, out); err != nil {
			t.Fatal(err)
		}
	}
	if n := m.Sweep(t0.Add(time.Minute)); n != 0 {
		t.Fatalf("sweep during the block removed %d buckets, want 0", n)
	}
	if d, _ := m.Peek(context.Background(), t0.Add(time.Minute), r[0]); !d.Blocked {
		t.Fatalf("after the sweep: got %+v, want Blocked", d)
	}
	if n := m.Sweep(t0.Add(time.Hour)); n != 1 {
		t.Errorf("sweep at the block's end removed %d buckets, want 1", n)
	}
}

// TestDecideAllocsWithBlock keeps the hot path at 0 allocations for
// policies that block, while no block is active.
func TestDecideAllocsWithBlock(t *testing.T) {
	m := NewMemoryStore(MemoryOptions{SweepInterval: -1})
	defer m.Close()
	p := MustPolicy(Policy{Name: "b", Algorithm: TokenBucket, Limit: 1_000_000, Window: time.Second, Block: time.Hour})
	r := []Request{{Policy: p, Key: "k"}}
	out := make([]Decision, 1)
	now := t0
	m.Decide(context.Background(), now, r, out)
	if n := testing.AllocsPerRun(1000, func() {
		now = now.Add(time.Microsecond)
		m.Decide(context.Background(), now, r, out)
	}); n != 0 {
		t.Errorf("got %v allocs per decision, want 0", n)
	}
}

// TestBlockEndsWithItsSetting: a reload that takes block: away from a
// policy keeps its buckets (block is not one of the settings a bucket
// depends on), and a block started before no longer refuses, as in the
// Redis store, whose script looks at a block only for a policy that has
// one.
func TestBlockEndsWithItsSetting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := NewMemoryStore(MemoryOptions{SweepInterval: -1})
	defer m.Close()
	p := MustPolicy(Policy{Name: "otp", Algorithm: FixedWindow, Limit: 1, Window: time.Minute, Block: time.Hour})
	now := time.Unix(1_700_000_000, 0)
	out := make([]Decision, 1)
	for range 2 {
		m.Decide(ctx, now, []Request{{Policy: p, Key: "k"}}, out)
	}
	if out[0].Allowed {
		t.Fatalf("second request in the window: allowed, want a rejection that blocks")
	}
	q := MustPolicy(Policy{Name: "otp", Algorithm: FixedWindow, Limit: 1, Window: time.Minute})
	m.Decide(ctx, now.Add(2*time.Minute), []Request{{Policy: q, Key: "k"}}, out)
	if !out[0].Allowed {
		t.Errorf("after a reload that took block away, a new window: %+v, want allowed", out[0])
	}
	if d, err := m.Peek(ctx, now.Add(2*time.Minute), Request{Policy: q, Key: "k"}); err != nil || d.Blocked {
		t.Errorf("peek after the reload: %+v, %v; want not blocked", d, err)
	}
}
