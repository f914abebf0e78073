package metrics

import "testing"

// TestLeaseFallbackGaugeWhileAnOverrideFallsBack: a policy and its
// override are leased apart and enter and leave their fallbacks apart
// (a full Redis may fail the override's fresh keys only), but share one
// gauge. It stays 1 while either decides with limit / N.
func TestLeaseFallbackGaugeWhileAnOverrideFallsBack(t *testing.T) {
	t.Parallel()
	m := New()
	m.LeaseDeclare("api")
	m.LeaseDeclare("api#override:5/1m0s")
	m.LeaseFallback("api", true)
	m.LeaseFallback("api#override:5/1m0s", true)
	m.LeaseFallback("api", false)
	wantValue(t, m, "sluice_ratelimit_lease_fallback", "policy=api", 1)
	m.LeaseFallback("api#override:5/1m0s", false)
	wantValue(t, m, "sluice_ratelimit_lease_fallback", "policy=api", 0)
}

// TestLeaseFallbackGaugeAfterForget: a reload that removes a policy while
// an override of it is in fallback forgets that too. Once the policy is
// served and leased again, its gauge reads only what its store reports
// from then on.
func TestLeaseFallbackGaugeAfterForget(t *testing.T) {
	t.Parallel()
	m := New()
	m.LeaseDeclare("api")
	m.LeaseFallback("api#override:5/1m0s", true)
	m.Forget(nil, []string{"api"})
	m.LeaseDeclare("api")
	m.LeaseFallback("api", true)
	m.LeaseFallback("api", false)
	wantValue(t, m, "sluice_ratelimit_lease_fallback", "policy=api", 0)
}
