package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/problem"
	"github.com/sluicehq/sluice/ratelimit"
)

// resetLimits answers DELETE /v1/limits?policy=NAME&key=VALUE: it makes the
// key's buckets fresh (the default one and every override's) and lifts
// their blocks, 204. It needs Authorization: Bearer
// with the admin token: without one configured every call gets 403, and a
// missing or wrong token 401 with WWW-Authenticate: Bearer. The token is
// never echoed, logged or counted.
func resetLimits(src Source) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		store := src.Store()
		if store == nil || !src.Ready().Loaded {
			problem.Error(w, http.StatusServiceUnavailable, "no configuration is loaded yet")
			return
		}
		want := src.AdminToken()
		if want == "" {
			problem.Error(w, http.StatusForbidden, "admin writes are turned off: set admin_token to allow them")
			return
		}
		if !tokenMatches(r.Header.Get("Authorization"), want) {
			w.Header().Set("WWW-Authenticate", "Bearer")
			problem.Error(w, http.StatusUnauthorized, "missing or wrong admin token: send Authorization: Bearer TOKEN")
			return
		}
		name, key, err := limitsQuery(r)
		if err != nil {
			problem.Error(w, http.StatusBadRequest, err.Error())
			return
		}
		p := src.Policy(name)
		if p == nil {
			problem.Error(w, http.StatusNotFound, "unknown policy "+strconv.Quote(name))
			return
		}
		// A 204 for a bucket no request could have made would be an
		// unlock that did not happen.
		if why := src.ClientKeyProblem(name, key); why != "" {
			problem.Error(w, http.StatusBadRequest, why)
			return
		}
		// The key's requests may have used its default bucket or an
		// override's: one that matched by client address is not told by
		// the key when the policy does not key on ip (or keys on an IPv6
		// /64 and the override names a longer prefix). Unlocking a
		// customer resets all of them, or a 204 could leave them blocked.
		for _, pol := range append([]*ratelimit.Policy{p}, src.Overrides(name)...) {
			if err := store.Reset(r.Context(), ratelimit.Request{Policy: pol, Key: bucketKey(key)}); err != nil {
				problem.Error(w, http.StatusServiceUnavailable, "resetting the bucket in the store: "+err.Error())
				return
			}
		}
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusNoContent)
	}
}

// tokenMatches reports whether the Authorization value carries want as a
// bearer token. Both sides are hashed first, so the comparison takes the
// same time whatever the token's length or the first byte that differs.
func tokenMatches(header, want string) bool {
	scheme, got, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		got = ""
	}
	g := sha256.Sum256([]byte(strings.TrimSpace(got)))
	h := sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], h[:]) == 1 && ok && got != ""
}
