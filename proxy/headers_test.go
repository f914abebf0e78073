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
