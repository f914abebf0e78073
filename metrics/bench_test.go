package metrics

import (
	"testing"
	"time"
)

func benchRoute() *Route {
	m := New()
	r := m.Route("api", []Limit{
		{Policy: "api-per-key", Algorithm: "token_bucket"},
		{Policy: "per-ip-hourly", Algorithm: "fixed_window", Shadow: true},
	})
	r.Request(200, time.Millisecond)
	return r
}

func BenchmarkRouteRequest(b *testing.B) {
	r := benchRoute()
	b.ReportAllocs()
	for b.Loop() {
		r.Request(200, 3*time.Millisecond)
	}
}

func BenchmarkRouteRequestParallel(b *testing.B) {
	r := benchRoute()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r.Request(200, 3*time.Millisecond)
		}
	})
}

func BenchmarkRouteDecision(b *testing.B) {
	r := benchRoute()
	b.ReportAllocs()
	for b.Loop() {
		r.Decision(0, Allowed)
	}
}

func BenchmarkRouteDecisionParallel(b *testing.B) {
	r := benchRoute()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r.Decision(0, Allowed)
		}
	})
}
