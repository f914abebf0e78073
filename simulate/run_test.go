package simulate

import (
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
)

// counts is a Result without its departures, for comparing.
type counts struct {
	accepted, rejected, queued, peak int
}

func countsOf(r Result) counts { return counts{r.Accepted, r.Rejected, r.Queued, r.Peak} }

func byAlgorithm(t *testing.T, rs []Result) map[string]Result {
	t.Helper()
	if len(rs) != len(ratelimit.Algorithms) {
		t.Fatalf("got %d results, want %d", len(rs), len(ratelimit.Algorithms))
	}
	m := make(map[string]Result)
	for i, r := range rs {
		if want := ratelimit.Algorithms[i].String(); r.Algorithm != want {
			t.Errorf("result %d: got algorithm %s, want %s", i, r.Algorithm, want)
		}
		if got := len(r.Departures); got != r.Accepted {
			t.Errorf("%s: got %d departures, want %d (accepted)", r.Algorithm, got, r.Accepted)
		}
		m[r.Algorithm] = r
	}
	return m
}

func seconds(s ...float64) []time.Duration {
	out := make([]time.Duration, len(s))
	for i, v := range s {
		out[i] = time.Duration(v * float64(time.Second))
	}
	return out
}

func TestRun(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		p        Params
		at       []Arrival
		want     map[string]counts
		wantDeps map[string][]time.Duration
	}{
		{
			name: "spec example across a window boundary",
			p:    Params{Limit: 100, Window: time.Minute},
			at:   []Arrival{{100, 58 * time.Second}, {100, 61 * time.Second}},
			want: map[string]counts{
				// 100 at once, then 3s of refill at 0.6s a token.
				"token_bucket": {105, 95, 0, 105},
				// No queue: one leaves at each instant.
				"leaky_bucket":           {2, 198, 0, 2},
				"fixed_window":           {200, 0, 0, 200},
				"sliding_window_log":     {100, 100, 0, 100},
				"sliding_window_counter": {102, 98, 0, 102},
			},
		},
		{
			name: "token_bucket burst smaller than limit",
			p:    Params{Limit: 60, Window: time.Minute, Burst: 10},
			// 10 at once, then 5 refilled in 5s, then the bucket is full again.
			at: []Arrival{{20, 0}, {20, 5 * time.Second}, {20, 10 * time.Minute}},
			want: map[string]counts{
				"token_bucket": {25, 35, 0, 15},
			},
			wantDeps: map[string][]time.Duration{
				"token_bucket": slices.Concat(slices.Repeat(seconds(0), 10), slices.Repeat(seconds(5), 5), slices.Repeat(seconds(600), 10)),
			},
		},
		{
			name: "leaky_bucket queue spaces departures by the interval",
			p:    Params{Limit: 10, Window: time.Second, Queue: 5},
			// One leaves now, five wait 100ms..500ms, the rest are turned
			// away; the group at 2s finds the bucket idle again.
			at: []Arrival{{10, 0}, {2, 2 * time.Second}},
			want: map[string]counts{
				"leaky_bucket": {8, 4, 6, 6},
			},
			wantDeps: map[string][]time.Duration{
				"leaky_bucket": seconds(0, 0.1, 0.2, 0.3, 0.4, 0.5, 2, 2.1),
			},
		},
		{
			name: "leaky_bucket max_wait tighter than the queue",
			p:    Params{Limit: 10, Window: time.Second, Queue: 5, MaxWait: 250 * time.Millisecond},
			at:   []Arrival{{10, 0}},
			want: map[string]counts{
				"leaky_bucket": {3, 7, 2, 3},
			},
			wantDeps: map[string][]time.Duration{
				"leaky_bucket": seconds(0, 0.1, 0.2),
			},
		},
		{
			name: "leaky_bucket peak counts requests when they leave",
			p:    Params{Limit: 2, Window: time.Second, Queue: 10},
			// All 11 arrive at once and are admitted, but they leave 500ms
			// apart, so no window sees more than 2 of them.
			at: []Arrival{{11, 0}},
			want: map[string]counts{
				"leaky_bucket": {11, 0, 10, 2},
				"fixed_window": {2, 9, 0, 2},
			},
			wantDeps: map[string][]time.Duration{
				"leaky_bucket": seconds(0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5),
			},
		},
		{
			name: "a queued request still waiting when later traffic comes",
			p:    Params{Limit: 1, Window: time.Second, Queue: 2},
			// At 0: one leaves, two wait (1s, 2s). At 1.5s the one leaving
			// at 2s still waits, so one place is free: it leaves at 3s.
			at: []Arrival{{3, 0}, {2, 1500 * time.Millisecond}},
			want: map[string]counts{
				"leaky_bucket": {4, 1, 3, 1},
			},
			wantDeps: map[string][]time.Duration{
				"leaky_bucket": seconds(0, 1, 2, 3),
			},
		},
		{
			name: "groups are sent in offset order",
			p:    Params{Limit: 100, Window: time.Minute},
			at:   []Arrival{{100, 61 * time.Second}, {100, 58 * time.Second}},
			want: map[string]counts{
				"fixed_window":           {200, 0, 0, 200},
				"sliding_window_log":     {100, 100, 0, 100},
				"sliding_window_counter": {102, 98, 0, 102},
			},
		},
		{
			name: "fixed_window lets twice the limit through around a boundary",
			p:    Params{Limit: 5, Window: 10 * time.Second},
			at:   []Arrival{{5, 9 * time.Second}, {5, 10 * time.Second}, {5, 18 * time.Second}},
			want: map[string]counts{
				"fixed_window":       {10, 5, 0, 10},
				"sliding_window_log": {5, 10, 0, 5},
			},
		},
		{
			name: "no traffic",
			p:    Params{Limit: 1, Window: time.Second},
			want: map[string]counts{
				"token_bucket": {}, "leaky_bucket": {}, "fixed_window": {},
				"sliding_window_log": {}, "sliding_window_counter": {},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rs, err := Run(tc.p, tc.at)
			if err != nil {
				t.Fatalf("got error %v, want none", err)
			}
			got := byAlgorithm(t, rs)
			for alg, want := range tc.want {
				if c := countsOf(got[alg]); c != want {
					t.Errorf("%s: got %+v, want %+v", alg, c, want)
				}
			}
			for alg, want := range tc.wantDeps {
				if deps := got[alg].Departures; !slices.Equal(deps, want) {
					t.Errorf("%s: got departures %v, want %v", alg, deps, want)
				}
			}
		})
	}
}

func TestRunErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		p    Params
		at   []Arrival
		want string
	}{
		{"zero params", Params{}, nil, "limit: must be > 0\nwindow: must be > 0"},
		{"negative settings", Params{Limit: 1, Window: time.Second, Burst: -1, Queue: -1, MaxWait: -time.Second}, nil,
			"burst: must be >= 0\nqueue: must be >= 0\nmax_wait: must be >= 0"},
		{"negative count", Params{Limit: 1, Window: time.Second}, []Arrival{{-1, 0}}, "arrival -1@0s: count must be >= 0"},
		{"negative offset", Params{Limit: 1, Window: time.Second}, []Arrival{{1, -time.Second}}, "arrival 1@-1s: offset must be >= 0"},
		{"too many", Params{Limit: 1, Window: time.Second}, []Arrival{{MaxRequests, 0}, {1, 0}}, "simulating more than 1000000 requests"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rs, err := Run(tc.p, tc.at)
			if err == nil {
				t.Fatalf("got %v, want error %q", rs, tc.want)
			}
			if err.Error() != tc.want {
				t.Errorf("got error %q, want %q", err, tc.want)
			}
		})
	}
}

func TestOrigin(t *testing.T) {
	t.Parallel()
	for _, w := range []time.Duration{time.Millisecond, 7 * time.Second, time.Minute, time.Hour, 24 * time.Hour, 10_000 * time.Hour} {
		t.Run(w.String(), func(t *testing.T) {
			t.Parallel()
			o := Origin(w)
			if r := o.UnixNano() % int64(w); r != 0 {
				t.Errorf("got origin %v, %v past a window boundary, want 0", o, time.Duration(r))
			}
			if o.After(base) || base.Sub(o) >= w {
				t.Errorf("got origin %v, want the boundary at or before %v", o, base)
			}
		})
	}
}

func TestPeak(t *testing.T) {
	t.Parallel()
	const w = time.Minute
	tests := []struct {
		name string
		deps []time.Duration
		want int
	}{
		{"none", nil, 0},
		{"one", seconds(5), 1},
		{"exactly one window apart are never together", seconds(0, 60), 1},
		{"just under one window apart are together", []time.Duration{0, w - 1}, 2},
		{"ties count as one instant", seconds(10, 10, 10, 70, 70), 3},
		{"a group joins the tail of the previous window", seconds(0, 30, 30, 89, 89, 90), 4},
		{"the earliest drops out as the window slides", seconds(0, 1, 2, 60, 61, 62, 62), 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := peak(tc.deps, w); got != tc.want {
				t.Errorf("got peak %d, want %d", got, tc.want)
			}
		})
	}
}

// BenchmarkRun sends MaxRequests through every algorithm: the largest
// simulation a user can ask for.
func BenchmarkRun(b *testing.B) {
	b.ReportAllocs()
	p := Params{Limit: 1000, Window: time.Second, Queue: 100}
	at := []Arrival{{MaxRequests / 2, 0}, {MaxRequests / 2, time.Hour}}
	for b.Loop() {
		rs, err := Run(p, at)
		if err != nil {
			b.Fatal(err)
		}
		if got := rs[2].Accepted; got != 2000 {
			b.Fatalf("fixed_window: got %d accepted, want 2000", got)
		}
	}
}
