package admin

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/problem"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
)

// Limits is the /v1/limits answer: the budget of one bucket right now.
type Limits struct {
	Policy    string `json:"policy"`
	Key       string `json:"key"`
	Algorithm string `json:"algorithm"`
	// Limit is the policy's requests per window.
	Limit int64 `json:"limit"`
	// Remaining is how many more requests the bucket admits right now
	// (for leaky_bucket, queue places included).
	Remaining int64 `json:"remaining"`
	// ResetSeconds is the whole seconds, rounded up, until the budget is
	// whole again.
	ResetSeconds int64 `json:"reset_seconds"`
	// BlockedSeconds is the whole seconds, rounded up, until the bucket's
	// block ends; absent when the bucket is not blocked.
	BlockedSeconds int64 `json:"blocked_seconds,omitempty"`
}

// limits answers GET /v1/limits?policy=NAME&key=VALUE. VALUE is the
// bucket's key values joined by "|" in the order of the policy's key list,
// as the gateway joins them (see bucketKey); an absent key is the empty
// key. The bucket is
// only peeked at: asking never consumes budget.
func limits(src Source) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name, key, err := limitsQuery(r)
		if err != nil {
			problem.Error(w, http.StatusBadRequest, err.Error())
			return
		}
		store := src.Store()
		if store == nil || !src.Ready().Loaded {
			problem.Error(w, http.StatusServiceUnavailable, "no configuration is loaded yet")
			return
		}
		p := src.Policy(name)
		if p == nil {
			problem.Error(w, http.StatusNotFound, "unknown policy "+strconv.Quote(name))
			return
		}
		if why := src.ClientKeyProblem(name, key); why != "" {
			problem.Error(w, http.StatusBadRequest, why)
			return
		}
		pol := p
		if o := src.Override(name, key); o != nil {
			pol = o
		}
		d, err := store.Peek(r.Context(), src.Now(), ratelimit.Request{Policy: pol, Key: bucketKey(key)})
		if err != nil {
			problem.Error(w, http.StatusServiceUnavailable, "reading the bucket from the store: "+err.Error())
			return
		}
		l := Limits{
			Policy:       p.Name,
			Key:          key,
			Algorithm:    p.Algorithm.String(),
			Limit:        pol.Limit,
			Remaining:    d.Remaining,
			ResetSeconds: ceilSeconds(d.Reset),
		}
		if d.Blocked {
			l.BlockedSeconds = max(ceilSeconds(d.RetryAfter), 1)
		}
		writeJSON(w, http.StatusOK, l)
	}
}

// bucketKey is the key the gateway keeps the bucket of key under: its
// digest when it is longer than routes.MaxKeyLen. Overrides are found by
// the key as given, whole or bounded (routes.Overrides.ForKey).
func bucketKey(key string) string {
	return string(routes.BoundKey([]byte(key), 0))
}

// ceilSeconds is d in whole seconds, rounded up; 0 for d <= 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// limitsQuery reads /v1/limits's policy and key. A query that does not
// parse (an unescaped ";", a "%" that starts no escape) or that gives
// either parameter twice is an error, never read as the parameters that
// did parse: url.Query would drop key=a;b and leave the empty key, whose
// bucket is the one shared by every client that sent none.
func limitsQuery(r *http.Request) (policy, key string, err error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return "", "", fmt.Errorf("query does not parse (%v): escape ; as %%3B and %% as %%25 in a key", err)
	}
	for _, p := range []string{"policy", "key"} {
		if len(q[p]) > 1 {
			return "", "", fmt.Errorf("query parameter %s given %d times: give it once", p, len(q[p]))
		}
	}
	if policy = q.Get("policy"); policy == "" {
		return "", "", errors.New("missing query parameter policy: use /v1/limits?policy=NAME&key=VALUE")
	}
	return policy, q.Get("key"), nil
}
