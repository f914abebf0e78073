package proxy

import (
	"bytes"
	"net/http"
	"strconv"

	"github.com/sluicehq/sluice/problem"
	"github.com/sluicehq/sluice/ratelimit"
)

// tooMany answers 429 for the route's limit i, which rejected the request;
// p is the policy it applied (an override's, or its own).
func (g *Gateway) tooMany(w http.ResponseWriter, rt *route, i int, p *ratelimit.Policy, d ratelimit.Decision, ex *exchange) {
	name := rt.r.Limits[i].Policy.Name
	ex.rejectedBy = name
	retry := max(seconds(d.RetryAfter), 1)
	h := w.Header()
	ex.retryValue[0] = strconv.FormatInt(retry, 10)
	h[hRetryAfter] = ex.retryValue[:]
	h[hXRateLimitRetry] = ex.retryValue[:]
	if p != rt.r.Limits[i].Policy && !d.Blocked {
		// An override's limit and window are in the detail.
		problem.Write(w, tooManyProblem(rt.r.Name, name, p, d.Blocked, retry))
		return
	}
	bp := lineBuffers.Get().(*[]byte)
	b := rt.rejected[i].append((*bp)[:0], d.Blocked, ex.retryValue[0])
	problem.WriteBody(w, http.StatusTooManyRequests, b)
	*bp = b
	lineBuffers.Put(bp)
}

// tooManyProblem is the 429 of the limit called name of route, applying
// policy p, for a client to retry in retry seconds.
func tooManyProblem(route, name string, p *ratelimit.Policy, blocked bool, retry int64) problem.Details {
	var buf [256]byte
	b := append(buf[:0], "rate limit "...)
	b = append(b, name...)
	b = append(b, " of route "...)
	b = append(b, route...)
	if blocked {
		b = append(b, " is blocking this client after too many requests"...)
	} else {
		b = append(b, " exceeded: "...)
		b = strconv.AppendInt(b, p.Limit, 10)
		b = append(b, " requests per "...)
		b = append(b, p.Window.String()...)
	}
	b = append(b, "; retry in "...)
	b = strconv.AppendInt(b, retry, 10)
	b = append(b, " s"...)
	return problem.Details{
		Status:     http.StatusTooManyRequests,
		Detail:     string(b),
		Policy:     name,
		RetryAfter: retry,
	}
}

// rejectedBody is a limit's 429 body, for its own policy, cut where the
// seconds to wait go: built once per load, so that a 429 escapes no
// string and formats no window. Its bytes are those of problem.Write of
// tooManyProblem (TestRejectedBodyMatchesProblem).
type rejectedBody struct {
	exceeded, blocked string // the body up to the first number, by Decision.Blocked
	policy            string // from after the first number to the second
}

func newRejectedBody(route string, p *ratelimit.Policy) rejectedBody {
	// The number goes where a 0 is: every byte around it is ASCII and
	// written as it is, so the escaping of the rest does not change.
	head := func(blocked bool) string {
		pd := tooManyProblem(route, p.Name, p, blocked, 0)
		pd.Policy, pd.RetryAfter = "", 0
		b := problem.Append(nil, pd)
		return string(b[:len(b)-len(`0 s"}`)])
	}
	tail := problem.Append(nil, problem.Details{Status: http.StatusTooManyRequests, Detail: " s", Policy: p.Name, RetryAfter: 1})
	// tail is {..."detail":" s","policy":"NAME","retry_after":1}.
	cut := bytes.Index(tail, []byte(`,"detail":"`)) + len(`,"detail":"`)
	return rejectedBody{exceeded: head(false), blocked: head(true), policy: string(tail[cut : len(tail)-len(`1}`)])}
}

// append appends the body for a client to retry in retry seconds, written
// in decimal.
func (rb *rejectedBody) append(b []byte, blocked bool, retry string) []byte {
	if blocked {
		b = append(b, rb.blocked...)
	} else {
		b = append(b, rb.exceeded...)
	}
	b = append(b, retry...)
	b = append(b, rb.policy...)
	b = append(b, retry...)
	return append(b, "}\n"...)
}
