package ratelimit

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestNewPolicyDefaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		in       Policy
		interval time.Duration
		burst    int64
		maxWait  time.Duration
		capacity int64
	}{
		{"token default burst", Policy{Algorithm: TokenBucket, Limit: 100, Window: time.Minute}, 600 * time.Millisecond, 100, 0, 100},
		{"token burst above limit", Policy{Algorithm: TokenBucket, Limit: 10, Window: time.Second, Burst: 25}, 100 * time.Millisecond, 25, 0, 25},
		{"leaky default max_wait", Policy{Algorithm: LeakyBucket, Limit: 10, Window: time.Second, Queue: 50}, 100 * time.Millisecond, 0, 5 * time.Second, 51},
		{"leaky max_wait below queue", Policy{Algorithm: LeakyBucket, Limit: 10, Window: time.Second, Queue: 50, MaxWait: 250 * time.Millisecond}, 100 * time.Millisecond, 0, 250 * time.Millisecond, 3},
		{"leaky queue 0", Policy{Algorithm: LeakyBucket, Limit: 10, Window: time.Second}, 100 * time.Millisecond, 0, 0, 1},
		{"fixed", Policy{Algorithm: FixedWindow, Limit: 3, Window: time.Hour}, 20 * time.Minute, 0, 0, 3},
		{"interval rounded up to a whole µs", Policy{Algorithm: TokenBucket, Limit: 3, Window: time.Second}, 333334 * time.Microsecond, 3, 0, 3},
		{"leaky interval rounded up", Policy{Algorithm: LeakyBucket, Limit: 3, Window: time.Second, Queue: 2}, 333334 * time.Microsecond, 0, 666668 * time.Microsecond, 3},
		{"tolerance rounded down to a whole µs", Policy{Algorithm: LeakyBucket, Limit: 10, Window: time.Second, Queue: 5, MaxWait: 250*time.Millisecond + 999}, 100 * time.Millisecond, 0, 250*time.Millisecond + 999, 3},
		{"window counters ignore the interval", Policy{Algorithm: FixedWindow, Limit: 2_000_000, Window: time.Second}, time.Microsecond, 0, 0, 2_000_000},
		{"interval at least 1µs", Policy{Algorithm: SlidingWindowLog, Limit: 10, Window: 5 * time.Microsecond}, time.Microsecond, 0, 0, 10},
		{"the largest limit", Policy{Algorithm: SlidingWindowCounter, Limit: MaxLimit, Window: time.Second}, time.Microsecond, 0, 0, MaxLimit},
		{"a long max_wait bounds a huge queue", Policy{Algorithm: LeakyBucket, Limit: 1, Window: 24 * time.Hour, Queue: 200_000, MaxWait: 72 * time.Hour}, 24 * time.Hour, 0, 72 * time.Hour, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.in.Name = "p"
			p, err := NewPolicy(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if p.Interval() != tc.interval || p.Burst != tc.burst || p.MaxWait != tc.maxWait || p.Capacity() != tc.capacity {
				t.Errorf("got interval %v burst %d max_wait %v capacity %d, want %v %d %v %d",
					p.Interval(), p.Burst, p.MaxWait, p.Capacity(), tc.interval, tc.burst, tc.maxWait, tc.capacity)
			}
		})
	}
}

func TestNewPolicyErrors(t *testing.T) {
	t.Parallel()
	_, err := NewPolicy(Policy{Algorithm: FixedWindow, Limit: -1, Window: 0, Burst: 3, Queue: 2, MaxWait: time.Second})
	want := []string{
		"name: must not be empty",
		"limit: must be > 0",
		"window: must be > 0",
		"burst: only token_bucket has a burst",
		"queue: only leaky_bucket has a queue",
		"max_wait: only leaky_bucket has a max_wait",
	}
	if err == nil {
		t.Fatal("got no error, want one per problem")
	}
	if got := strings.Split(err.Error(), "\n"); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("got errors\n%s\nwant\n%s", err, strings.Join(want, "\n"))
	}
	if _, err := NewPolicy(Policy{Name: "p", Algorithm: 0, Limit: 1, Window: time.Second}); err == nil {
		t.Error("algorithm 0: got no error, want one")
	}
}

// TestNewPolicyUnrepresentable checks that what a store cannot count
// exactly is an error at the field, not a policy that silently admits more,
// less, or nothing at all.
func TestNewPolicyUnrepresentable(t *testing.T) {
	t.Parallel()
	const year = 365 * 24 * time.Hour
	for _, tc := range []struct {
		name string
		in   Policy
		want string
	}{
		{"window below a microsecond", Policy{Algorithm: SlidingWindowLog, Limit: 10, Window: 5},
			"window: 5ns is not a whole number of microseconds, which the stores count in"},
		{"window with a fraction of a microsecond", Policy{Algorithm: FixedWindow, Limit: 10, Window: time.Second + 1},
			"window: 1.000000001s is not a whole number of microseconds, which the stores count in"},
		{"2,000,000 per second", Policy{Algorithm: TokenBucket, Limit: 2_000_000, Window: time.Second},
			"limit: the interval window / limit is 500ns, not a whole number of microseconds; rounded up to 1µs it would admit 50% fewer requests than 2000000 per 1s (at most 0.1% is allowed)"},
		{"300,000 per second", Policy{Algorithm: LeakyBucket, Limit: 300_000, Window: time.Second},
			"limit: the interval window / limit is 3.333µs, not a whole number of microseconds; rounded up to 4µs it would admit 16.7% fewer requests than 300000 per 1s (at most 0.1% is allowed)"},
		{"leaky 1/24h queue 200000", Policy{Algorithm: LeakyBucket, Limit: 1, Window: 24 * time.Hour, Queue: 200_000},
			"queue: queue x interval (200000 x 24h0m0s) must be at most 100 years: set a max_wait, or a smaller queue"},
		{"token 10/8760h burst 3000", Policy{Algorithm: TokenBucket, Limit: 10, Window: 8760 * time.Hour, Burst: 3000},
			"burst: burst x interval (3000 x 876h0m0s) must be at most 100 years: the bucket could not be counted"},
		// A window over a century is said once, not again as the burst
		// or queue it makes too long.
		{"token with a default burst over a century", Policy{Algorithm: TokenBucket, Limit: 1, Window: 200 * year},
			"window: must be at most 100 years (876000h0m0s)"},
		{"token with a burst over a century by its window", Policy{Algorithm: TokenBucket, Limit: 1, Window: 200 * year, Burst: 2},
			"window: must be at most 100 years (876000h0m0s)"},
		{"leaky with a queue over a century by its window", Policy{Algorithm: LeakyBucket, Limit: 1, Window: 200 * year, Queue: 2},
			"window: must be at most 100 years (876000h0m0s)"},
		{"max_wait over a century", Policy{Algorithm: LeakyBucket, Limit: 1, Window: time.Hour, Queue: 10, MaxWait: 101 * year},
			"max_wait: must be at most 100 years (876000h0m0s)"},
		{"queue overflowing int64", Policy{Algorithm: LeakyBucket, Limit: 1, Window: time.Hour, Queue: 1 << 62},
			"queue: queue x interval (4611686018427387904 x 1h0m0s) must be at most 100 years: set a max_wait, or a smaller queue"},
		{"block over a century", Policy{Algorithm: FixedWindow, Limit: 1, Window: time.Minute, Block: 2_500_000 * time.Hour},
			"block: must be at most 100 years (876000h0m0s)"},
		{"fixed_window limit 10^15", Policy{Algorithm: FixedWindow, Limit: 1_000_000_000_000_000, Window: time.Second},
			"limit: must be at most 999999999999999: RateLimit-Policy gives it as a Structured Field integer, of at most 15 digits"},
		{"fixed_window limit 2^53", Policy{Algorithm: FixedWindow, Limit: 1 << 53, Window: time.Second},
			"limit: must be at most 999999999999999: RateLimit-Policy gives it as a Structured Field integer, of at most 15 digits"},
		{"sliding_window_log limit 2^63 - 1", Policy{Algorithm: SlidingWindowLog, Limit: math.MaxInt64, Window: MaxSpan},
			"limit: must be at most 999999999999999: RateLimit-Policy gives it as a Structured Field integer, of at most 15 digits"},
		{"sliding_window_counter limit 2^53 + 1", Policy{Algorithm: SlidingWindowCounter, Limit: 1<<53 + 1, Window: time.Millisecond},
			"limit: must be at most 999999999999999: RateLimit-Policy gives it as a Structured Field integer, of at most 15 digits"},
		{"token_bucket limit 2^63 - 1", Policy{Algorithm: TokenBucket, Limit: math.MaxInt64, Window: MaxSpan},
			"limit: must be at most 999999999999999: RateLimit-Policy gives it as a Structured Field integer, of at most 15 digits"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.in.Name = "p"
			p, err := NewPolicy(tc.in)
			if err == nil {
				t.Fatalf("got policy with interval %v, capacity %d; want error %q", p.Interval(), p.Capacity(), tc.want)
			}
			if got := err.Error(); got != tc.want {
				t.Errorf("got error\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestParseAlgorithm(t *testing.T) {
	t.Parallel()
	for _, a := range Algorithms {
		got, err := ParseAlgorithm(a.String())
		if err != nil || got != a {
			t.Errorf("ParseAlgorithm(%q): got %v, %v, want %v", a.String(), got, err, a)
		}
	}
	if _, err := ParseAlgorithm("token-bucket"); err == nil {
		t.Error(`ParseAlgorithm("token-bucket"): got no error, want one`)
	}
	if got, want := Algorithm(9).String(), "Algorithm(9)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestNewPolicySync(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		in   Policy
		err  string // "" when the policy compiles
	}{
		{"fixed_window leases", Policy{Algorithm: FixedWindow, Limit: 10, Window: time.Second, Sync: SyncLease}, ""},
		{"token_bucket leases", Policy{Algorithm: TokenBucket, Limit: 10, Window: time.Second, Burst: 20, Sync: SyncLease}, ""},
		{"sliding_window_counter leases", Policy{Algorithm: SlidingWindowCounter, Limit: 10, Window: time.Second, Sync: SyncLease}, ""},
		{"leaky_bucket does not", Policy{Algorithm: LeakyBucket, Limit: 10, Window: time.Second, Sync: SyncLease}, "sync: lease works with fixed_window, token_bucket and sliding_window_counter, not leaky_bucket"},
		{"sliding_window_log does not", Policy{Algorithm: SlidingWindowLog, Limit: 10, Window: time.Second, Sync: SyncLease}, "sync: lease works with fixed_window, token_bucket and sliding_window_counter, not sliding_window_log"},
		{"no block beside a lease", Policy{Algorithm: FixedWindow, Limit: 10, Window: time.Second, Block: time.Minute, Sync: SyncLease}, "sync: lease does not support block: a block would need a Redis call per rejected request"},
		{"block per request", Policy{Algorithm: FixedWindow, Limit: 10, Window: time.Second, Block: time.Minute}, ""},
		{"unknown sync", Policy{Algorithm: FixedWindow, Limit: 10, Window: time.Second, Sync: 7}, "sync: unknown sync 7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.in.Name = "p"
			p, err := NewPolicy(tc.in)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tc.err {
				t.Fatalf("got error %q, want %q", got, tc.err)
			}
			if err == nil && p.Settings().Sync != tc.in.Sync {
				t.Errorf("Settings().Sync: got %v, want %v", p.Settings().Sync, tc.in.Sync)
			}
		})
	}
	a := MustPolicy(Policy{Name: "p", Algorithm: FixedWindow, Limit: 10, Window: time.Second})
	b := MustPolicy(Policy{Name: "p", Algorithm: FixedWindow, Limit: 10, Window: time.Second, Sync: SyncLease})
	if a.Settings() == b.Settings() {
		t.Error("a leased policy has the Settings of its per-request twin, want them to differ (a change starts afresh)")
	}
}
