package ratelimittest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
)

// refundCases give back one of several admitted requests. After the
// refund, the bucket must answer exactly as a bucket that never saw that
// request. takes are the decision times; token_bucket is exact only when
// no decision found its bucket full, so it runs the cases marked tb, with
// every take at one instant.
var refundCases = []struct {
	name   string
	takes  []time.Duration
	refund int           // index into takes
	at     time.Duration // when the unit is given back
	checks []time.Duration
	tb     bool
}{
	{name: "first of three", takes: []time.Duration{0, sec, 2 * sec}, refund: 0, at: 3 * sec, checks: []time.Duration{3 * sec, 5 * sec, 8 * sec, 9 * sec, 17 * sec}},
	{name: "last of three", takes: []time.Duration{0, sec, 2 * sec}, refund: 2, at: 2*sec + 500*ms, checks: []time.Duration{3 * sec, 8*sec + 500*ms, 10 * sec}},
	{name: "after its window ended", takes: []time.Duration{0, sec}, refund: 0, at: 9 * sec, checks: []time.Duration{9 * sec, 12 * sec, 17 * sec}},
	{name: "counted in the previous window", takes: []time.Duration{sec, 2 * sec, 9 * sec}, refund: 1, at: 10 * sec, checks: []time.Duration{10 * sec, 12 * sec, 15 * sec, 20 * sec}},
	{name: "at one instant", takes: []time.Duration{0, 0, 0}, refund: 1, at: 0, checks: []time.Duration{0, 500 * ms, 2 * sec, 7 * sec}, tb: true},
	{name: "at one instant, refunded later", takes: []time.Duration{0, 0, 0, 0}, refund: 3, at: 3 * sec, checks: []time.Duration{3 * sec, 4 * sec, 7 * sec}, tb: true},
}

// refundable are the algorithms count_status may give back for.
var refundable = []ratelimit.Algorithm{ratelimit.TokenBucket, ratelimit.FixedWindow, ratelimit.SlidingWindowLog, ratelimit.SlidingWindowCounter}

func runRefund(t *testing.T, open func(*testing.T) ratelimit.Store) {
	for _, a := range refundable {
		for i, tc := range refundCases {
			if a == ratelimit.TokenBucket && !tc.tb {
				continue
			}
			t.Run(a.String()+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				s := open(t)
				p := mustPolicy(t, ratelimit.Policy{Name: fmt.Sprintf("refund-%d-%d", a, i), Algorithm: a, Limit: 4, Window: 8 * sec})
				got := ratelimit.Request{Policy: p, Key: "refunded"}
				ref := ratelimit.Request{Policy: p, Key: "reference"}
				var taken ratelimit.Decision
				for j, at := range tc.takes {
					d := decide(t, s, T0.Add(at), []ratelimit.Request{got})[0]
					if !d.Allowed {
						t.Fatalf("take %d at +%v: got rejected, want allowed", j, at)
					}
					if j == tc.refund {
						taken = d
						continue
					}
					decide(t, s, T0.Add(at), []ratelimit.Request{ref})
				}
				if taken.Ticket == (ratelimit.Ticket{}) {
					t.Fatalf("admitted decision has a zero Ticket")
				}
				if err := s.Refund(context.Background(), T0.Add(tc.at), []ratelimit.Request{got}, []ratelimit.Decision{taken}); err != nil {
					t.Fatalf("refunding: %v", err)
				}
				for _, at := range tc.checks {
					want := peek(t, s, T0.Add(at), ref)
					checkDecision(t, fmt.Sprintf("peek at +%v", at), T0.Add(at), peek(t, s, T0.Add(at), got), want)
				}
				// The bucket takes the same requests from here on.
				last := tc.checks[len(tc.checks)-1]
				for j := range 5 {
					want := decide(t, s, T0.Add(last), []ratelimit.Request{ref})[0]
					want.Ticket = ratelimit.Ticket{}
					checkDecision(t, fmt.Sprintf("request %d at +%v", j, last), T0.Add(last), decide(t, s, T0.Add(last), []ratelimit.Request{got})[0], want)
				}
			})
		}
	}
	t.Run("token returns to a partly drained bucket", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		p := mustPolicy(t, ratelimit.Policy{Name: "refund-tb-drained", Algorithm: ratelimit.TokenBucket, Limit: 4, Window: 8 * sec})
		r := ratelimit.Request{Policy: p, Key: "k"}
		first := decide(t, s, T0, []ratelimit.Request{r})[0]
		decide(t, s, T0.Add(sec), []ratelimit.Request{r})
		before := peek(t, s, T0.Add(3*sec), r)
		if err := s.Refund(context.Background(), T0.Add(3*sec), []ratelimit.Request{r}, []ratelimit.Decision{first}); err != nil {
			t.Fatal(err)
		}
		after := peek(t, s, T0.Add(3*sec), r)
		// Two tokens spent, 1.5 refilled: 3.5 of 4; one more is full.
		if before.Remaining != 3 || after.Remaining != 4 || after.Reset != 0 {
			t.Errorf("got remaining %d then %d (reset %v), want 3 then 4 (reset 0)", before.Remaining, after.Remaining, after.Reset)
		}
		// A full bucket takes nothing more back.
		if err := s.Refund(context.Background(), T0.Add(3*sec), []ratelimit.Request{r}, []ratelimit.Decision{first}); err != nil {
			t.Fatal(err)
		}
		if d := decide(t, s, T0.Add(3*sec), []ratelimit.Request{r, r, r, r, r}); d[4].Allowed || !d[3].Allowed {
			t.Errorf("after a second refund of a full bucket: got %+v, want 4 of 5 admitted", d)
		}
	})
	// A request admitted before a Reset and settled after it gives
	// nothing to the fresh bucket, which never counted it: otherwise
	// every request in flight at a reset would add one to the budget.
	for _, a := range refundable {
		t.Run(a.String()+"/reset between take and refund", func(t *testing.T) {
			t.Parallel()
			s := open(t)
			p := mustPolicy(t, ratelimit.Policy{Name: "refund-reset-" + a.String(), Algorithm: a, Limit: 2, Window: 8 * sec, Hold: true})
			r := ratelimit.Request{Policy: p, Key: "k"}
			before := decide(t, s, T0, []ratelimit.Request{r})[0]
			if err := s.Reset(context.Background(), r); err != nil {
				t.Fatal(err)
			}
			after := decide(t, s, T0.Add(ms), []ratelimit.Request{r, r})
			if !after[0].Allowed || !after[1].Allowed {
				t.Fatalf("after the reset: got %+v, want both admitted", after)
			}
			if err := s.Refund(context.Background(), T0.Add(2*ms), []ratelimit.Request{r}, []ratelimit.Decision{before}); err != nil {
				t.Fatal(err)
			}
			if d := decide(t, s, T0.Add(3*ms), []ratelimit.Request{r})[0]; d.Allowed {
				t.Errorf("a third request after the reset: admitted, want rejected (limit 2)")
			}
			// The requests of after the reset still give back.
			if err := s.Refund(context.Background(), T0.Add(4*ms), []ratelimit.Request{r}, after[1:]); err != nil {
				t.Fatal(err)
			}
			if d := decide(t, s, T0.Add(5*ms), []ratelimit.Request{r})[0]; !d.Allowed {
				t.Errorf("after a refund of a request of after the reset: rejected, want admitted")
			}
		})
	}
	t.Run("zero ticket gives nothing back", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		p := mustPolicy(t, ratelimit.Policy{Name: "refund-zero", Algorithm: ratelimit.FixedWindow, Limit: 1, Window: 8 * sec})
		r := ratelimit.Request{Policy: p, Key: "k"}
		d := decide(t, s, T0, []ratelimit.Request{r})[0]
		d.Ticket = ratelimit.Ticket{}
		if err := s.Refund(context.Background(), T0, []ratelimit.Request{r}, []ratelimit.Decision{d}); err != nil {
			t.Fatal(err)
		}
		if got := peek(t, s, T0, r); got.Remaining != 0 {
			t.Errorf("got remaining %d, want 0", got.Remaining)
		}
	})
}

func runBlock(t *testing.T, open func(*testing.T) ratelimit.Store) {
	for _, a := range ratelimit.Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			t.Parallel()
			s := open(t)
			pol := ratelimit.Policy{Name: "block-" + a.String(), Algorithm: a, Limit: 2, Window: 10 * sec, Block: 30 * sec}
			p := mustPolicy(t, pol)
			r := ratelimit.Request{Policy: p, Key: "k"}
			// The leaky bucket takes one at once and one in the queue.
			if a == ratelimit.LeakyBucket {
				pol.Queue = 1
				p = mustPolicy(t, pol)
				r.Policy = p
			}
			decide(t, s, T0, []ratelimit.Request{r})
			decide(t, s, T0, []ratelimit.Request{r})
			first := decide(t, s, T0.Add(sec), []ratelimit.Request{r})[0]
			if first.Allowed || first.Blocked || first.RetryAfter != 30*sec {
				t.Fatalf("first rejection: got %+v, want rejected, not Blocked, RetryAfter 30s", first)
			}
			for _, at := range []time.Duration{2 * sec, 15 * sec, 30 * sec} {
				want := ratelimit.Decision{Limit: 2, Blocked: true, RetryAfter: 31*sec - at, Reset: 31*sec - at}
				checkDecision(t, fmt.Sprintf("during the block at +%v", at), T0.Add(at), decide(t, s, T0.Add(at), []ratelimit.Request{r})[0], want)
				checkDecision(t, fmt.Sprintf("peek at +%v", at), T0.Add(at), peek(t, s, T0.Add(at), r), want)
			}
			// Rejections during the block consumed nothing and did not
			// extend it: at its end the bucket is as the budget left it.
			d := decide(t, s, T0.Add(31*sec), []ratelimit.Request{r})[0]
			if !d.Allowed || d.Blocked {
				t.Errorf("at the block's end: got %+v, want allowed", d)
			}
		})
	}
	// Reset is when the budget is whole again: a block ends before that
	// when the budget it left stays spent longer, and Reset then says
	// so, while RetryAfter points at the block's end. A twin policy
	// without the block, given the same requests, tells when that is.
	for _, a := range ratelimit.Algorithms {
		t.Run(a.String()+"/reset past the block", func(t *testing.T) {
			t.Parallel()
			s := open(t)
			pol := ratelimit.Policy{Name: "block-reset-" + a.String(), Algorithm: a, Limit: 2, Window: time.Minute, Block: 10 * sec}
			if a == ratelimit.LeakyBucket {
				pol.Queue = 1
			}
			twin := pol
			twin.Name, twin.Block = "block-reset-twin-"+a.String(), 0
			for _, r := range []ratelimit.Request{{Policy: mustPolicy(t, pol), Key: "k"}, {Policy: mustPolicy(t, twin), Key: "k"}} {
				decide(t, s, T0, []ratelimit.Request{r})
				decide(t, s, T0, []ratelimit.Request{r})
				if d := decide(t, s, T0.Add(sec), []ratelimit.Request{r})[0]; d.Allowed {
					t.Fatalf("%s: third request admitted", r.Policy.Name)
				}
			}
			r := ratelimit.Request{Policy: mustPolicy(t, pol), Key: "k"}
			now := T0.Add(3 * sec)
			whole := peek(t, s, now, ratelimit.Request{Policy: mustPolicy(t, twin), Key: "k"}).Reset
			if whole <= 8*sec {
				t.Fatalf("twin: Reset %v, want past the block's end", whole)
			}
			want := ratelimit.Decision{Limit: 2, Blocked: true, RetryAfter: 8 * sec, Reset: whole}
			checkDecision(t, "peek during the block", now, peek(t, s, now, r), want)
			checkDecision(t, "request during the block", now, decide(t, s, now, []ratelimit.Request{r})[0], want)
		})
	}
	t.Run("blocked limit charges no other", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		blk := mustPolicy(t, ratelimit.Policy{Name: "block-a", Algorithm: ratelimit.FixedWindow, Limit: 1, Window: 10 * sec, Block: time.Minute})
		other := mustPolicy(t, ratelimit.Policy{Name: "block-b", Algorithm: ratelimit.SlidingWindowLog, Limit: 3, Window: 10 * sec})
		reqs := []ratelimit.Request{{Policy: blk, Key: "k"}, {Policy: other, Key: "k"}}
		decide(t, s, T0, reqs)
		for range 5 {
			if ds := decide(t, s, T0.Add(sec), reqs); ds[0].Allowed {
				t.Fatalf("got allowed past the limit")
			}
		}
		if got := peek(t, s, T0.Add(sec), reqs[1]); got.Remaining != 2 {
			t.Errorf("other limit: got remaining %d, want 2", got.Remaining)
		}
	})
	// Two limits that reject one request together each start their own
	// block: the second is not left unblocked because the first rejected.
	t.Run("both limits reject: each blocks", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		a := mustPolicy(t, ratelimit.Policy{Name: "block-both-a", Algorithm: ratelimit.FixedWindow, Limit: 1, Window: 10 * sec, Block: time.Minute})
		b := mustPolicy(t, ratelimit.Policy{Name: "block-both-b", Algorithm: ratelimit.TokenBucket, Limit: 1, Window: 10 * sec, Block: 2 * time.Minute})
		reqs := []ratelimit.Request{{Policy: a, Key: "k"}, {Policy: b, Key: "k"}}
		decide(t, s, T0, reqs)
		ds := decide(t, s, T0.Add(sec), reqs)
		for i, want := range []time.Duration{time.Minute, 2 * time.Minute} {
			if ds[i].Allowed || ds[i].Blocked || ds[i].RetryAfter != want {
				t.Errorf("limit %d, first rejection: got %+v, want rejected, not Blocked, RetryAfter %v", i, ds[i], want)
			}
			got := peek(t, s, T0.Add(2*sec), reqs[i])
			if !got.Blocked || got.RetryAfter != want-sec {
				t.Errorf("limit %d, peek after: got %+v, want Blocked, RetryAfter %v", i, got, want-sec)
			}
		}
	})
	// count_status and block together: the answers of requests admitted
	// before the block come back during it. Their units go back, but the
	// block stands to its end, and then the bucket is as if they had
	// never been counted.
	for _, a := range refundable {
		t.Run(a.String()+"/given back during the block", func(t *testing.T) {
			t.Parallel()
			s := open(t)
			p := mustPolicy(t, ratelimit.Policy{Name: "block-refund-" + a.String(), Algorithm: a, Limit: 2, Window: 2 * time.Hour, Block: time.Hour, Hold: true})
			r := ratelimit.Request{Policy: p, Key: "k"}
			taken := decide(t, s, T0, []ratelimit.Request{r})
			taken = append(taken, decide(t, s, T0, []ratelimit.Request{r})...)
			if !taken[0].Allowed || !taken[1].Allowed {
				t.Fatalf("two requests: got %+v, want both admitted", taken)
			}
			if d := decide(t, s, T0.Add(sec), []ratelimit.Request{r})[0]; d.Allowed || d.Blocked || d.RetryAfter < time.Hour {
				t.Fatalf("third request: got %+v, want a rejection that starts the block", d)
			}
			if err := s.Refund(context.Background(), T0.Add(2*sec), []ratelimit.Request{r, r}, taken); err != nil {
				t.Fatalf("refunding: %v", err)
			}
			left := time.Hour - 2*sec
			want := ratelimit.Decision{Limit: 2, Blocked: true, RetryAfter: left, Reset: left}
			checkDecision(t, "peek after the give-back", T0.Add(3*sec), peek(t, s, T0.Add(3*sec), r), want)
			checkDecision(t, "request after the give-back", T0.Add(3*sec), decide(t, s, T0.Add(3*sec), []ratelimit.Request{r})[0], want)
			// The window is still the one both were counted in, and a
			// token takes an hour to refill: only the give-back leaves
			// room for two.
			end := T0.Add(time.Hour + sec)
			ds := decide(t, s, end, []ratelimit.Request{r})
			ds = append(ds, decide(t, s, end, []ratelimit.Request{r})...)
			if !ds[0].Allowed || !ds[1].Allowed || ds[1].Remaining != 0 {
				t.Errorf("at the block's end: got %+v, want two admitted, none left", ds)
			}
		})
	}
	// SPEC §8: a block is state of the bucket, "kept across a reload
	// that leaves the policy unchanged": a new *Policy with the same
	// settings finds the key blocked. One whose limit changed has fresh
	// buckets, with no block (§6: only unchanged policies keep state).
	for _, a := range ratelimit.Algorithms {
		t.Run(a.String()+"/across a reload", func(t *testing.T) {
			t.Parallel()
			s := open(t)
			pol := ratelimit.Policy{Name: "block-reload-" + a.String(), Algorithm: a, Limit: 1, Window: 10 * sec, Block: time.Hour}
			if a == ratelimit.LeakyBucket {
				pol.Queue = 0
			}
			r := ratelimit.Request{Policy: mustPolicy(t, pol), Key: "k"}
			decide(t, s, T0, []ratelimit.Request{r})
			if d := decide(t, s, T0, []ratelimit.Request{r})[0]; d.Allowed {
				t.Fatalf("second request: got %+v, want a rejection that blocks", d)
			}
			same := ratelimit.Request{Policy: mustPolicy(t, pol), Key: "k"}
			if d := decide(t, s, T0.Add(time.Minute), []ratelimit.Request{same})[0]; d.Allowed || !d.Blocked || d.RetryAfter != time.Hour-time.Minute {
				t.Errorf("unchanged policy, a minute later: got %+v, want Blocked with RetryAfter 59m", d)
			}
			changed := pol
			changed.Limit = 2
			fresh := ratelimit.Request{Policy: mustPolicy(t, changed), Key: "k"}
			if d := decide(t, s, T0.Add(time.Minute), []ratelimit.Request{fresh})[0]; !d.Allowed || d.Blocked {
				t.Errorf("limit changed: got %+v, want allowed in a fresh bucket", d)
			}
		})
	}
	t.Run("shadow never blocks", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		p := mustPolicy(t, ratelimit.Policy{Name: "block-shadow", Algorithm: ratelimit.FixedWindow, Limit: 1, Window: 10 * sec, Block: time.Minute, Shadow: true})
		r := ratelimit.Request{Policy: p, Key: "k"}
		decide(t, s, T0, []ratelimit.Request{r})
		if d := decide(t, s, T0, []ratelimit.Request{r})[0]; d.Allowed || d.Blocked || d.RetryAfter != 10*sec {
			t.Errorf("got %+v, want a plain rejection with RetryAfter 10s", d)
		}
		if d := decide(t, s, T0.Add(10*sec), []ratelimit.Request{r})[0]; !d.Allowed {
			t.Errorf("next window: got %+v, want allowed", d)
		}
	})
}

func runReset(t *testing.T, open func(*testing.T) ratelimit.Store) {
	for _, a := range ratelimit.Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			t.Parallel()
			s := open(t)
			p := mustPolicy(t, ratelimit.Policy{Name: "reset-" + a.String(), Algorithm: a, Limit: 2, Window: 10 * sec, Block: time.Hour})
			r := ratelimit.Request{Policy: p, Key: "k"}
			fresh := peek(t, s, T0, r)
			for range 4 {
				decide(t, s, T0, []ratelimit.Request{r})
			}
			if d := peek(t, s, T0.Add(sec), r); !d.Blocked {
				t.Fatalf("before reset: got %+v, want Blocked", d)
			}
			if err := s.Reset(context.Background(), r); err != nil {
				t.Fatalf("resetting: %v", err)
			}
			checkDecision(t, "peek after reset", T0, peek(t, s, T0, r), fresh)
			if d := decide(t, s, T0.Add(sec), []ratelimit.Request{r})[0]; !d.Allowed {
				t.Errorf("after reset: got %+v, want allowed", d)
			}
			// Resetting a bucket that does not exist is no error.
			if err := s.Reset(context.Background(), ratelimit.Request{Policy: p, Key: "never"}); err != nil {
				t.Errorf("resetting an unknown bucket: %v", err)
			}
		})
	}
}
