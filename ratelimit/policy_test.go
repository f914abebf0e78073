package ratelimit

import (
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
		{"interval at least 1ns", Policy{Algorithm: SlidingWindowLog, Limit: 10, Window: 5}, 1, 0, 0, 10},
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
