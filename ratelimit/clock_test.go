package ratelimit

import (
	"strings"
	"testing"
	"time"
)

func TestClockFollowsElapsedTime(t *testing.T) {
	t.Parallel()
	wall := t0
	var elapsed time.Duration
	c := NewClock(func() time.Time { return wall }, func() time.Duration { return elapsed })
	wall = wall.Add(-time.Hour) // stepped after the start: no effect
	elapsed = 90 * time.Second
	if got, want := c.Now(), t0.Add(90*time.Second); !got.Equal(want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestSystemClockKeepsMonotonicReading(t *testing.T) {
	t.Parallel()
	c := SystemClock()
	now := c.Now()
	// Timers armed for a departure (time.Until) rely on the reading.
	if !strings.Contains(now.String(), " m=") {
		t.Errorf("got %v, want a time with a monotonic reading (m=...)", now)
	}
	if d := time.Since(now); d < 0 || d > time.Second {
		t.Errorf("time.Since(Now()) = %v, want a moment", d)
	}
}

// BenchmarkClockNow compares the decision clock with time.Now, which the
// gateway called before.
func BenchmarkClockNow(b *testing.B) {
	b.Run("time.Now", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = time.Now()
		}
	})
	b.Run("Clock.Now", func(b *testing.B) {
		b.ReportAllocs()
		c := SystemClock()
		for b.Loop() {
			_ = c.Now()
		}
	})
	b.Run("Clock.Now/parallel", func(b *testing.B) {
		b.ReportAllocs()
		c := SystemClock()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_ = c.Now()
			}
		})
	})
}
