package metrics

import (
	"errors"
	"testing"
	"time"
)

func TestHotPathDoesNotAllocate(t *testing.T) {
	m := New()
	r := m.Route("api", []Limit{
		{Policy: "api-per-key", Algorithm: "token_bucket"},
		{Policy: "orders-shaping", Algorithm: "leaky_bucket"},
	})
	q := m.Queue("orders-shaping")
	s := m.Store("redis")
	storeErr := errors.New("store down")
	r.Request(200, time.Millisecond) // warm the code's counter
	r.Decision(1, Rejected)
	for _, tc := range []struct {
		name string
		f    func()
	}{
		{"Route.Request", func() { r.Request(200, 3*time.Millisecond) }},
		{"Route.Decision", func() { r.Decision(0, Allowed); r.Decision(1, Queued) }},
		{"Route.Decision lazily created", func() { r.Decision(1, Rejected) }},
		{"Route.UpstreamError", func() { r.UpstreamError(UpstreamReset) }},
		{"Queue.Enter and Leave", func() { q.Enter(); q.Leave(40 * time.Millisecond) }},
		{"Store.Observe", func() { s.Observe(200*time.Microsecond, nil) }},
		{"Store.Observe error", func() { s.Observe(50*time.Millisecond, storeErr) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := testing.AllocsPerRun(1000, tc.f); got != 0 {
				t.Errorf("allocs per run: got %v, want 0", got)
			}
		})
	}
}
