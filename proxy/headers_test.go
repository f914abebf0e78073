package proxy

import (
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
)

// TestMostRestrictiveTieOnShownRemaining: the classic fields describe the
// limit of the lowest remaining, the first in route order on a tie (SPEC
// §4), and the remaining compared is the one the fields show, never below
// 0. A limit whose Remaining came back below 0 shows 0 like one at 0, so
// the first of the two is the most restrictive; comparing the raw values
// took the later one, whose X-RateLimit-Limit and Reset then went out.
// Both ways of writing the fields are tried: without an override and with
// one that exempts nothing.
func TestMostRestrictiveTieOnShownRemaining(t *testing.T) {
	pols := []*ratelimit.Policy{
		{Limit: 5, Window: time.Minute},
		{Limit: 10, Window: time.Hour},
		{Limit: 20, Window: time.Hour},
	}
	rt := &route{
		visible:      []int{0, 1, 2},
		quoted:       []string{`"a"`, `"b"`, `"c"`},
		policyHeader: []string{policyHeader([]string{`"a"`, `"b"`, `"c"`}, pols)},
	}
	ds := []ratelimit.Decision{
		{Allowed: true, Limit: 5, Remaining: 0, RetryAfter: 12 * time.Second, Reset: 60 * time.Second},
		{Allowed: true, Limit: 10, Remaining: -1, RetryAfter: 30 * time.Second, Reset: 3600 * time.Second},
		{Allowed: true, Limit: 20, Remaining: 3, RetryAfter: 1 * time.Second, Reset: 10 * time.Second},
	}
	reqs := make([]ratelimit.Request, len(pols))
	for i, p := range pols {
		reqs[i].Policy = p
	}
	for name, set := range map[string]func(http.Header){
		"setLimitHeaders": func(h http.Header) {
			var v [4]string
			rt.setLimitHeaders(h, ds, &v)
		},
		"setOverriddenHeaders": func(h http.Header) {
			rt.setOverriddenHeaders(h, reqs, ds, &matched{exempt: make([]bool, len(pols)), any: true})
		},
	} {
		h := http.Header{}
		set(h)
		if got, want := h.Get(hRateLimit), `"a";r=0;t=12, "b";r=0;t=30, "c";r=3;t=1`; got != want {
			t.Errorf("%s: RateLimit %q, want %q", name, got, want)
		}
		for k, want := range map[string]string{
			hXRateLimitLimit:  "5",
			hXRateLimitRemain: "0",
			hXRateLimitReset:  "60",
		} {
			if got := h.Values(k); len(got) != 1 || got[0] != want {
				t.Errorf("%s: %s %q, want [%q] (the first limit showing r=0)", name, k, got, want)
			}
		}
	}
}

// TestRemainingFitsStructuredField: r is a Structured Field integer, at
// most 15 digits (RFC 9651 §3.3.1), or a strict client cannot parse the
// RateLimit field at all. A limit cannot pass that (ratelimit.MaxLimit),
// but a token_bucket's burst and a leaky_bucket's queue places can, up
// to 100 years' worth of 1µs intervals: such a remaining count shows as
// the largest r there is, in X-RateLimit-Remaining too.
func TestRemainingFitsStructuredField(t *testing.T) {
	tb := ratelimit.MustPolicy(ratelimit.Policy{Name: "tb", Algorithm: ratelimit.TokenBucket, Limit: 1_000_000, Window: time.Second, Burst: int64(ratelimit.MaxSpan / time.Microsecond)})
	lb := ratelimit.MustPolicy(ratelimit.Policy{Name: "lb", Algorithm: ratelimit.LeakyBucket, Limit: 1_000_000, Window: time.Second, Queue: 1 << 62, MaxWait: ratelimit.MaxSpan})
	pols := []*ratelimit.Policy{tb, lb}
	rt := &route{
		visible:      []int{0, 1},
		quoted:       []string{`"tb"`, `"lb"`},
		policyHeader: []string{policyHeader([]string{`"tb"`, `"lb"`}, pols)},
	}
	ds := []ratelimit.Decision{
		{Allowed: true, Limit: tb.Limit, Remaining: tb.Capacity() - 1, RetryAfter: time.Microsecond, Reset: time.Microsecond},
		{Allowed: true, Limit: lb.Limit, Remaining: lb.Capacity(), RetryAfter: time.Microsecond, Reset: time.Microsecond},
	}
	reqs := []ratelimit.Request{{Policy: tb}, {Policy: lb}}
	for name, set := range map[string]func(http.Header){
		"setLimitHeaders": func(h http.Header) {
			var v [4]string
			rt.setLimitHeaders(h, ds, &v)
		},
		"setOverriddenHeaders": func(h http.Header) {
			rt.setOverriddenHeaders(h, reqs, ds, &matched{exempt: make([]bool, len(pols)), any: true})
		},
	} {
		h := http.Header{}
		set(h)
		if got, want := h.Get(hRateLimit), `"tb";r=999999999999999;t=1, "lb";r=999999999999999;t=1`; got != want {
			t.Errorf("%s: RateLimit %q, want %q", name, got, want)
		}
		if got, want := h.Get(hXRateLimitRemain), "999999999999999"; got != want {
			t.Errorf("%s: X-RateLimit-Remaining %q, want %q", name, got, want)
		}
	}
}
