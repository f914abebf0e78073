package redisstore

import (
	"strconv"
	"testing"
	"time"
)

// TestSchedulesBounded checks that the schedules a store keeps for the
// hand-over between Redis and its fallback stay bounded whatever the
// number of keys, and forget what has passed.
func TestSchedulesBounded(t *testing.T) {
	t.Parallel()
	var m schedules
	now := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	for i := range maxSchedules {
		m.record("k"+strconv.Itoa(i), now.Add(time.Second), now)
	}
	m.record("late", now.Add(time.Second), now)
	if _, ok := m.take("late", now); ok {
		t.Errorf("a key beyond the bound while all are live: got remembered, want dropped")
	}
	if next, ok := m.take("k7", now); !ok || !next.Equal(now.Add(time.Second)) {
		t.Errorf("k7: got %v, %v; want %v, true", next, ok, now.Add(time.Second))
	}
	if _, ok := m.take("k7", now); ok {
		t.Errorf("k7 taken twice: got remembered, want forgotten")
	}
	// Two seconds on, everything has passed: a look sweeps it all away,
	// and nothing is pending any more.
	later := now.Add(2 * time.Second)
	if _, ok := m.take("k8", later); ok {
		t.Errorf("k8 passed: got remembered, want forgotten")
	}
	if len(m.next) != 0 || m.pending.Load() {
		t.Errorf("after everything passed: got %d entries, pending %v; want none", len(m.next), m.pending.Load())
	}
	m.record("new", later.Add(time.Second), later)
	if _, ok := m.take("new", later); !ok {
		t.Errorf("a key recorded after the sweep: got forgotten, want remembered")
	}
}
