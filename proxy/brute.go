package proxy

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
)

// matched records which limits of one request an override matched: the
// slow path of admit, taken only when some override applies.
type matched struct {
	exempt []bool
	any    bool // some limit has an override that is not exempt
}

// matchOverride returns the policy limit l applies to a request whose key
// values are k, recording an exempting or overriding match in *m.
func matchOverride(l *routes.Limit, i, n int, k []byte, ex *exchange, m **matched) *ratelimit.Policy {
	o := l.Overrides.Match(k, ex.client)
	if o == nil {
		return l.Policy
	}
	if *m == nil {
		*m = &matched{exempt: make([]bool, n)}
	}
	if o.Exempt {
		(*m).exempt[i] = true
		return l.Policy
	}
	(*m).any = true
	return o.Policy
}

// decideExempt decides reqs without the exempt limits: they are not
// limited or charged, and read as admitted with nothing to report.
func decideExempt(ctx context.Context, store ratelimit.Store, now time.Time, reqs []ratelimit.Request, ds []ratelimit.Decision, exempt []bool) error {
	var sub []ratelimit.Request
	var idx []int
	for i := range reqs {
		if !exempt[i] {
			sub = append(sub, reqs[i])
			idx = append(idx, i)
		}
	}
	out := make([]ratelimit.Decision, len(sub))
	if len(sub) > 0 {
		if err := store.Decide(ctx, now, sub, out); err != nil {
			return err
		}
	}
	for i := range ds {
		ds[i] = ratelimit.Decision{Allowed: true}
	}
	for j, i := range idx {
		ds[i] = out[j]
	}
	return nil
}

// setOverriddenHeaders is setLimitHeaders for a request some override
// matched: the RateLimit-Policy items show the numbers of the policy each
// limit applied, and exempt limits are left out like shadow ones.
func (rt *route) setOverriddenHeaders(h http.Header, reqs []ratelimit.Request, ds []ratelimit.Decision, m *matched) {
	var b, pb []byte
	most := -1
	for _, i := range rt.visible {
		if m.exempt[i] {
			continue
		}
		d := &ds[i]
		p := reqs[i].Policy
		if most >= 0 {
			b = append(b, ", "...)
			pb = append(pb, ", "...)
		}
		b = append(b, rt.quoted[i]...)
		b = append(b, ";r="...)
		b = strconv.AppendInt(b, shownRemaining(d), 10)
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, seconds(d.RetryAfter), 10)
		pb = append(pb, rt.quoted[i]...)
		pb = append(pb, ";q="...)
		pb = strconv.AppendInt(pb, p.Limit, 10)
		pb = append(pb, ";w="...)
		pb = strconv.AppendInt(pb, max(seconds(p.Window), 1), 10)
		if most < 0 || shownRemaining(d) < shownRemaining(&ds[most]) {
			most = i
		}
	}
	if most < 0 {
		return
	}
	h[hRateLimitPolicy] = []string{string(pb)}
	h[hRateLimit] = []string{string(b)}
	d := &ds[most]
	h[hXRateLimitLimit] = []string{strconv.FormatInt(d.Limit, 10)}
	h[hXRateLimitRemain] = []string{strconv.FormatInt(shownRemaining(d), 10)}
	h[hXRateLimitReset] = []string{strconv.FormatInt(seconds(d.Reset), 10)}
}

// countAdmitted counts the decisions of an admitted request.
func (rt *route) countAdmitted(reqs []ratelimit.Request, ds []ratelimit.Decision, m *matched) {
	for i := range ds {
		switch {
		case m != nil && m.exempt[i]:
			rt.metrics.Decision(i, metrics.Exempt)
		case !ds[i].Allowed:
			rt.metrics.Decision(i, metrics.ShadowRejected)
		case ds[i].Delay > 0 && !reqs[i].Policy.Shadow:
			rt.metrics.Decision(i, metrics.Queued)
		default:
			rt.metrics.Decision(i, metrics.Allowed)
		}
	}
}

// armRefund makes the request's answer settle the units its count_status
// limits took: once its status is known and is not one count_status
// lists, they are given back (Store.Refund) before the client has the
// answer, so that its next request finds them. The others are kept
// (Store.Keep, which ends a token_bucket's hold) when the exchange ends,
// off the answer's path: counted statuses, and every unit of a client
// that went away first, whose guess got an answer, or made the upstream
// work, all the same.
func (g *Gateway) armRefund(s *snapshot, rt *route, rec *recorder, r *http.Request, ex *exchange, reqs []ratelimit.Request, ds []ratelimit.Decision, m *matched) {
	var idx []int
	for i, l := range rt.r.Limits {
		if l.CountStatus != nil && ds[i].Allowed && ds[i].Ticket != (ratelimit.Ticket{}) && (m == nil || !m.exempt[i]) {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return
	}
	for _, i := range idx {
		if ds[i].Ticket.Hold != 0 {
			ex.held = append(ex.held, i)
		}
	}
	rec.onStatus = func(code int) {
		if r.Context().Err() != nil {
			return // the client went away: its guess still cost work
		}
		if f := ex.body.failure(); f != nil && f.sent {
			// The client broke its own body (a framing error, a pause
			// past client_body_timeout, max_body) after part of it
			// went on, so the upstream may have had its guess: the unit
			// stays spent. Given back for the 400, 408 or 413 sluice
			// then answers, a guesser could send each guess whole, then
			// a bad chunk, and never spend a unit.
			return
		}
		var give []int
		for _, i := range idx {
			if !rt.r.Limits[i].CountStatus.Has(code) {
				give = append(give, i)
			}
		}
		if code == http.StatusSwitchingProtocols {
			// A 101 is the whole answer of a handshake; the exchange
			// ends only with the tunnel, hours later maybe: the
			// counted units are kept now, or their token_bucket hold
			// would last the tunnel's life.
			defer g.keepHeld(s, rt, r, ex)
		}
		if len(give) == 0 {
			return
		}
		sub := make([]ratelimit.Request, len(give))
		subd := make([]ratelimit.Decision, len(give))
		for j, i := range give {
			sub[j], subd[j] = reqs[i], ds[i]
		}
		// Given back or not, the units are settled: none is kept later.
		ex.held = slices.DeleteFunc(ex.held, func(i int) bool { return slices.Contains(give, i) })
		if err := s.store.Refund(context.WithoutCancel(r.Context()), g.clock.Now(), sub, subd); err != nil {
			g.log.Warn("giving back rate limit units", "route", rt.r.Name, "request_id", ex.id, "err", err)
			return
		}
		for _, i := range give {
			rt.metrics.Refund(i)
		}
		rt.showGivenBack(rec.Header(), reqs, ds, give, m, ex)
	}
}

// showGivenBack rewrites the answer's limit fields for the units given
// back, whose buckets admit one more request now than when the request was
// decided: r one higher, and t and the classic Reset 0 once the bucket is
// whole again. A token_bucket's Reset, the time its used tokens take to
// refill, is one interval shorter without the token. (Elsewhere, where the
// bucket is not whole, t and Reset stay as decided: a give-back may bring
// either earlier, never later.)
func (rt *route) showGivenBack(h http.Header, reqs []ratelimit.Request, ds []ratelimit.Decision, give []int, m *matched, ex *exchange) {
	ds = slices.Clone(ds)
	for _, i := range give {
		d, p := &ds[i], reqs[i].Policy
		d.Remaining = min(d.Remaining+1, p.Capacity())
		switch {
		case d.Remaining == p.Capacity():
			d.RetryAfter, d.Reset = 0, 0
		case p.Algorithm == ratelimit.TokenBucket:
			d.Reset = max(d.Reset-p.Interval(), d.RetryAfter)
		}
	}
	if m != nil {
		rt.setOverriddenHeaders(h, reqs, ds, m)
	} else {
		rt.setLimitHeaders(h, ds, &ex.limitValues)
	}
}

// keepHeld keeps the units of the exchange's decisions that are still
// held, once its answer is over; each is settled once.
func (g *Gateway) keepHeld(s *snapshot, rt *route, r *http.Request, ex *exchange) {
	if len(ex.held) == 0 || ex.decisions == nil {
		return
	}
	dc := ex.decisions
	sub := make([]ratelimit.Request, len(ex.held))
	subd := make([]ratelimit.Decision, len(ex.held))
	for j, i := range ex.held {
		sub[j], subd[j] = dc.reqs[i], dc.ds[i]
	}
	ex.held = nil
	if err := s.store.Keep(context.WithoutCancel(r.Context()), g.clock.Now(), sub, subd); err != nil {
		g.log.Warn("keeping rate limit units", "route", rt.r.Name, "request_id", ex.id, "err", err)
	}
}
