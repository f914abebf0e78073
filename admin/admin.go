// Package admin serves sluice's admin listener: Prometheus metrics, health
// and readiness probes, and a read-only view of a bucket's budget.
package admin

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/problem"
	"github.com/sluicehq/sluice/ratelimit"
)

// Source is what the admin listener reads. The gateway implements it over
// its current configuration, which a reload swaps atomically, so every
// method must be safe for concurrent use.
type Source interface {
	// Policy returns the compiled policy called name (ROUTE#N for an
	// inline one), or nil when the configuration has none of that name.
	// It is only called while Ready reports Loaded.
	Policy(name string) *ratelimit.Policy
	// Override returns the policy of the override of policy name that
	// lists key among its keys, whose bucket then holds key's budget, or
	// nil when none does (or it is exempt). Called like Policy.
	Override(name, key string) *ratelimit.Policy
	// Overrides returns the policies of every override of policy name
	// that is not exempt, one per bucket name, in the policy's order;
	// none when it has no overrides. Called like Policy.
	Overrides(name string) []*ratelimit.Policy
	// ClientKeyProblem reports why key names no bucket of policy name
	// that a request could have made, as routes.Config.ClientKeyProblem
	// does; "" when nothing is known to be wrong with it. Called like
	// Policy.
	ClientKeyProblem(name, key string) string
	// AdminToken returns the bearer token admin writes need; "" refuses
	// them all.
	AdminToken() string
	// Store returns the store that keeps the policies' buckets; nil until
	// a configuration is loaded.
	Store() ratelimit.Store
	// Ready reports what /readyz answers from.
	Ready() Readiness
	// Now is the time the gateway decides limits at (its ratelimit.Clock),
	// at which /v1/limits reads a bucket.
	Now() time.Time
}

// Readiness is the state /readyz reports.
type Readiness struct {
	// Loaded is true once a configuration serves.
	Loaded bool
	// StoreHealthy is true while the store answers.
	StoreHealthy bool
	// DenyOnStoreError is true when the store's on_error is deny, so an
	// unreachable store means requests are refused.
	DenyOnStoreError bool
	// Draining is true once shutdown has begun: the instance must leave
	// the load balancer's rotation while it finishes what it holds.
	Draining bool
}

// Handler returns the admin listener's handler:
//
//	/metrics    the Prometheus exposition of m
//	/healthz    200 {"status":"ok"} while the process is up
//	/readyz     200 {"status":"ok"}, 200 {"status":"degraded"}, 503 {"status":"unavailable"} or 503 {"status":"draining"}
//	/v1/limits  GET ?policy=NAME&key=VALUE: a bucket's budget, consuming none;
//	            DELETE: reset the bucket and lift its block (needs the admin token)
//
// Each answers GET and HEAD, and /v1/limits DELETE; other methods get 405,
// unknown paths 404, both as problem+json. The handler is safe for
// concurrent use.
func Handler(m *metrics.Metrics, src Source) http.Handler {
	mh := m.Handler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var h http.Handler
		switch r.URL.Path {
		case "/metrics":
			// promhttp sets no Cache-Control; a cache between the
			// scraper and sluice would serve stale counters.
			w.Header().Set("Cache-Control", "no-store")
			h = mh
		case "/healthz":
			h = http.HandlerFunc(healthz)
		case "/readyz":
			h = readyz(src)
		case "/v1/limits":
			if r.Method == http.MethodDelete {
				resetLimits(src).ServeHTTP(w, r)
				return
			}
			h = limits(src)
		default:
			problem.Error(w, http.StatusNotFound, "no admin endpoint at "+strconv.Quote(r.URL.Path))
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			allow := "GET, HEAD"
			if r.URL.Path == "/v1/limits" {
				allow = "GET, HEAD, DELETE"
			}
			w.Header().Set("Allow", allow)
			problem.Error(w, http.StatusMethodNotAllowed, r.Method+" is not allowed on "+r.URL.Path+"; use GET")
			return
		}
		h.ServeHTTP(w, r)
	})
}

func healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, status{"ok"})
}

type status struct {
	Status string `json:"status"`
}

// readyz answers 200 while requests can be served as configured: ok with a
// healthy store, degraded when the store is down but on_error lets requests
// through (allow or a local limiter). With on_error deny a store outage
// refuses every request, so the instance is not ready. Once shutdown has
// begun it answers 503 draining whatever the store's state.
func readyz(src Source) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		rd := src.Ready()
		switch {
		case rd.Draining:
			writeJSON(w, http.StatusServiceUnavailable, status{"draining"})
		case !rd.Loaded:
			writeJSON(w, http.StatusServiceUnavailable, status{"unavailable"})
		case rd.StoreHealthy:
			writeJSON(w, http.StatusOK, status{"ok"})
		case rd.DenyOnStoreError:
			writeJSON(w, http.StatusServiceUnavailable, status{"unavailable"})
		default:
			writeJSON(w, http.StatusOK, status{"degraded"})
		}
	}
}

// writeJSON sends v as a JSON body that no cache keeps.
func writeJSON(w http.ResponseWriter, code int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		problem.Error(w, http.StatusInternalServerError, "encoding the answer failed")
		return
	}
	body = append(body, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	w.Write(body)
}
