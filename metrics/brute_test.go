package metrics

import "testing"

// TestRefundsBlockedExempt counts the results and the give-backs of
// count_status, block and exempt overrides, with their zero series.
func TestRefundsBlockedExempt(t *testing.T) {
	t.Parallel()
	m := New()
	r := m.Route("login", []Limit{
		{Policy: "logins", Algorithm: "sliding_window_log", Refunds: true, Blocks: true},
		{Policy: "per-ip", Algorithm: "fixed_window"},
	})
	wantValue(t, m, "sluice_ratelimit_refunds_total", "policy=logins,route=login", 0)
	wantValue(t, m, "sluice_ratelimit_decisions_total", "algorithm=sliding_window_log,policy=logins,result=blocked,route=login", 0)
	if _, ok := value(t, m, "sluice_ratelimit_refunds_total", "policy=per-ip,route=login"); ok {
		t.Errorf("a limit without count_status has a refund series")
	}
	r.Refund(0)
	r.Refund(0)
	r.Refund(5) // out of range: ignored
	r.Decision(0, Blocked)
	r.Decision(1, Exempt)
	wantValue(t, m, "sluice_ratelimit_refunds_total", "policy=logins,route=login", 2)
	wantValue(t, m, "sluice_ratelimit_decisions_total", "algorithm=sliding_window_log,policy=logins,result=blocked,route=login", 1)
	wantValue(t, m, "sluice_ratelimit_decisions_total", "algorithm=fixed_window,policy=per-ip,result=exempt,route=login", 1)
	m.Retain(nil, nil)
	if _, ok := value(t, m, "sluice_ratelimit_refunds_total", "policy=logins,route=login"); ok {
		t.Errorf("refund series kept after its route went away")
	}
}

// TestKeysFoldOverrides counts an override's buckets under its policy.
func TestKeysFoldOverrides(t *testing.T) {
	t.Parallel()
	m := New()
	m.Route("r", []Limit{{Policy: "api", Algorithm: "fixed_window"}, {Policy: "orders#2", Algorithm: "fixed_window"}})
	m.SetKeys(func() map[string]int64 {
		return map[string]int64{"api": 3, "api#override1": 2, "api#override2": 1, "orders#2": 4, "orders#2#override1": 1}
	})
	wantValue(t, m, "sluice_ratelimit_keys", "policy=api", 6)
	wantValue(t, m, "sluice_ratelimit_keys", "policy=orders#2", 5)
}
