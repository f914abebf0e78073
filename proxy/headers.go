package proxy

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
)

// Header names sluice sets on the responses of limited routes.
const (
	hRateLimit        = "Ratelimit"
	hRateLimitPolicy  = "Ratelimit-Policy"
	hXRateLimitLimit  = "X-Ratelimit-Limit"
	hXRateLimitRemain = "X-Ratelimit-Remaining"
	hXRateLimitReset  = "X-Ratelimit-Reset"
	hXRateLimitRetry  = "X-Ratelimit-Retry-After"
	hRetryAfter       = "Retry-After"
	hRequestID        = "X-Request-Id"
	hXForwardedFor    = "X-Forwarded-For"
	hXForwardedHost   = "X-Forwarded-Host"
	hXForwardedProto  = "X-Forwarded-Proto"
	hXRealIP          = "X-Real-Ip"
)

// limitHeaders are the fields sluice owns on a limited route's responses; an
// upstream's own values for them are dropped so clients see one answer.
var limitHeaders = []string{hRateLimit, hRateLimitPolicy, hXRateLimitLimit, hXRateLimitRemain, hXRateLimitReset, hXRateLimitRetry}

// seconds rounds d up to whole seconds, never below 0.
func seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// sfString quotes s as a Structured Field string (RFC 9651).
func sfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '"' || c == '\\' {
			b.WriteByte('\\')
		}
		if c < 0x20 || c > 0x7e {
			c = '_'
		}
		b.WriteByte(c)
	}
	b.WriteByte('"')
	return b.String()
}

// policyHeader is the RateLimit-Policy value of a route's visible limits:
// "name";q=LIMIT;w=WINDOW_SECONDS, in route order. It never changes between
// requests, so it is built once per load.
func policyHeader(names []string, pols []*ratelimit.Policy) string {
	var b strings.Builder
	for i, p := range pols {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(names[i])
		b.WriteString(";q=")
		b.WriteString(strconv.FormatInt(p.Limit, 10))
		b.WriteString(";w=")
		b.WriteString(strconv.FormatInt(max(seconds(p.Window), 1), 10))
	}
	return b.String()
}

// sfMaxInteger is the largest Structured Field integer, 15 digits (RFC
// 9651 §3.3.1).
const sfMaxInteger = 999_999_999_999_999

// shownRemaining is the remaining of d as the fields show it: r and
// X-RateLimit-Remaining, never below 0 and never above sfMaxInteger, which
// a token_bucket's burst or a leaky_bucket's queue can pass (a limit
// cannot: ratelimit.MaxLimit).
func shownRemaining(d *ratelimit.Decision) int64 {
	return min(max(d.Remaining, 0), sfMaxInteger)
}

// setLimitHeaders writes RateLimit and the classic X-RateLimit-* fields for
// the route's visible (non-shadow) limits. The classic fields describe the
// most restrictive limit: the lowest remaining as shown (shownRemaining),
// the first on a tie. Their value slices are cut from v, which the caller
// allocates with the request.
func (rt *route) setLimitHeaders(h http.Header, ds []ratelimit.Decision, v *[4]string) {
	if len(rt.visible) == 0 {
		return
	}
	var buf [256]byte
	b := buf[:0]
	most := -1
	for n, i := range rt.visible {
		d := &ds[i]
		if n > 0 {
			b = append(b, ", "...)
		}
		b = append(b, rt.quoted[i]...)
		b = append(b, ";r="...)
		b = strconv.AppendInt(b, shownRemaining(d), 10)
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, seconds(d.RetryAfter), 10)
		if most < 0 || shownRemaining(d) < shownRemaining(&ds[most]) {
			most = i
		}
	}
	// The four values share one string and the caller's array: one
	// allocation instead of eight.
	d := &ds[most]
	n0 := len(b)
	b = strconv.AppendInt(b, d.Limit, 10)
	n1 := len(b)
	b = strconv.AppendInt(b, shownRemaining(d), 10)
	n2 := len(b)
	b = strconv.AppendInt(b, seconds(d.Reset), 10)
	all := string(b)
	v[0], v[1], v[2], v[3] = all[:n0], all[n0:n1], all[n1:n2], all[n2:]
	h[hRateLimitPolicy] = rt.policyHeader
	h[hRateLimit] = v[0:1:1]
	h[hXRateLimitLimit] = v[1:2:2]
	h[hXRateLimitRemain] = v[2:3:3]
	h[hXRateLimitReset] = v[3:4:4]
}
