package e2e

import (
	"fmt"
	"testing"
	"time"
)

// recorder is a reporter that keeps what it is told.
type recorder struct{ errs []string }

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestLeaseChecksCatchExcess feeds the checks of the lease tests made-up
// admissions: they must convict an excess the timings pin down and
// acquit one the client's uncertainty can explain.
func TestLeaseChecksCatchExcess(t *testing.T) {
	t.Parallel()
	const w = time.Second
	t0 := windowStart(windowOf(time.Now(), w)+1, w)
	at := func(from, to time.Duration, n int) []admission {
		out := make([]admission, n)
		for i := range out {
			out[i] = admission{lo: t0.Add(from), hi: t0.Add(to)}
		}
		return out
	}
	cat := func(parts ...[]admission) []admission {
		var out []admission
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	cases := []struct {
		name  string
		check func(reporter)
		fails bool
	}{
		{"fixed: limit in each window", func(r reporter) {
			checkPerWindow(r, cat(at(100*time.Millisecond, 200*time.Millisecond, 10), at(w+100*time.Millisecond, w+200*time.Millisecond, 10)), w, 10)
		}, false},
		{"fixed: one over in a window", func(r reporter) {
			checkPerWindow(r, at(100*time.Millisecond, 200*time.Millisecond, 11), w, 10)
		}, true},
		{"fixed: one straddling, placeable in the second", func(r reporter) {
			checkPerWindow(r, cat(at(100*time.Millisecond, 200*time.Millisecond, 10), at(900*time.Millisecond, w+100*time.Millisecond, 1)), w, 10)
		}, false},
		{"fixed: straddlers that fit nowhere", func(r reporter) {
			checkPerWindow(r, cat(at(100*time.Millisecond, 200*time.Millisecond, 10), at(900*time.Millisecond, w+100*time.Millisecond, 1), at(w+200*time.Millisecond, w+300*time.Millisecond, 10)), w, 10)
		}, true},
		{"bucket: the burst at once", func(r reporter) {
			checkTokenBucket(r, at(0, time.Millisecond, 10), 10, 100)
		}, false},
		{"bucket: the burst and more at once", func(r reporter) {
			checkTokenBucket(r, at(0, time.Millisecond, 12), 10, 100)
		}, true},
		{"bucket: burst plus the refill of 100ms", func(r reporter) {
			checkTokenBucket(r, cat(at(0, time.Millisecond, 10), at(100*time.Millisecond, 101*time.Millisecond, 10)), 10, 100)
		}, false},
		{"bucket: more than burst plus refill over 100ms", func(r reporter) {
			checkTokenBucket(r, cat(at(0, time.Millisecond, 10), at(100*time.Millisecond, 101*time.Millisecond, 12)), 10, 100)
		}, true},
		{"counter: the estimate's room after a full window", func(r reporter) {
			// prev 10, at f = 0.5 the estimate is 5 + cur: 5 fit.
			checkCounter(r, cat(at(100*time.Millisecond, 200*time.Millisecond, 10), at(w+500*time.Millisecond, w+500*time.Millisecond, 5)), w, 10)
		}, false},
		{"counter: past the estimate's room", func(r reporter) {
			checkCounter(r, cat(at(100*time.Millisecond, 200*time.Millisecond, 10), at(w+500*time.Millisecond, w+500*time.Millisecond, 7)), w, 10)
		}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var r recorder
			tc.check(&r)
			if got := len(r.errs) > 0; got != tc.fails {
				t.Errorf("check failed: %v (%q), want %v", got, r.errs, tc.fails)
			}
		})
	}
}

// TestCheckSlowestComparesLikeWithLike feeds checkSlowest made-up answer
// times: ten times as many limited answers as free ones may have a few
// slower than the slowest free one, as chance gives a larger sample, but
// not a slowdown shared by many, nor one far past what the machine took.
func TestCheckSlowestComparesLikeWithLike(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	took := func(d ...time.Duration) []shot {
		out := make([]shot, len(d))
		for i := range d {
			out[i] = shot{start: t0, end: t0.Add(d[i])}
		}
		return out
	}
	many := func(n int, d time.Duration, more ...time.Duration) []time.Duration {
		out := make([]time.Duration, n)
		for i := range out {
			out[i] = d
		}
		return append(out, more...)
	}
	const ms = time.Millisecond
	free := took(many(10, 100*ms, 1000*ms)...) // 11 free, the slowest 1s
	for _, tc := range []struct {
		name  string
		shots []time.Duration
		fails bool
	}{
		{"as fast as free", many(110, 100*ms, 1000*ms), false},
		{"a few past free by chance", many(100, 100*ms, 1800*ms, 2000*ms, 2200*ms), false},
		{"a tenth slower than free allows", many(99, 100*ms, many(11, 1600*ms)...), true},
		{"one far past free", many(109, 100*ms, 3600*ms), true},
	} {
		var r recorder
		checkSlowest(&r, took(tc.shots...), free, 500*ms)
		if got := len(r.errs) > 0; got != tc.fails {
			t.Errorf("%s: got failure %v (%q), want %v", tc.name, got, r.errs, tc.fails)
		}
	}
	// A machine so busy that a free answer took 2s: the margin is half
	// of that, 1s.
	busy := took(many(10, 400*ms, 2000*ms)...)
	for _, tc := range []struct {
		name  string
		shots []time.Duration
		fails bool
	}{
		{"busy: a tenth within half of free past it", many(99, 400*ms, many(11, 2800*ms)...), false},
		{"busy: a tenth more than half of free past it", many(99, 400*ms, many(11, 3200*ms)...), true},
	} {
		var r recorder
		checkSlowest(&r, took(tc.shots...), busy, 500*ms)
		if got := len(r.errs) > 0; got != tc.fails {
			t.Errorf("%s: got failure %v (%q), want %v", tc.name, got, r.errs, tc.fails)
		}
	}
}
