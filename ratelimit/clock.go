package ratelimit

import "time"

// Clock tells the time limits are decided at: the wall time read once, when
// the clock starts, plus the time elapsed since on a clock that never
// steps. A wall clock that is stepped afterwards (by NTP, or by hand) moves
// no decision: a token bucket does not answer a retry an hour away when
// the wall clock goes back an hour, and a forward step does not refill
// every bucket. Decisions still line up with other instances and with
// Redis, whose windows are aligned to Unix time, to within the wall clock's
// error at start and the monotonic clock's drift since (parts per million).
//
// Only the edge of the program, where requests come in, reads a Clock; it
// hands the time to the stores as an argument. A Clock is safe for
// concurrent use. Create it with NewClock or SystemClock; the zero value is
// not usable.
type Clock struct {
	start   time.Time
	elapsed func() time.Duration
}

// NewClock starts a Clock at wall() and advances it by elapsed(), the time
// since the start on a clock that never steps. Tests step wall and drive
// elapsed to play a wall clock that jumps while time goes on.
func NewClock(wall func() time.Time, elapsed func() time.Duration) *Clock {
	return &Clock{start: wall(), elapsed: elapsed}
}

// SystemClock starts a Clock at time.Now, advancing with the monotonic
// reading Go keeps beside the wall time. The times it returns carry that
// reading too, so time.Until and time.Since of them (a timer armed for a
// departure, say) are also immune to wall clock steps.
func SystemClock() *Clock {
	start := time.Now()
	return &Clock{start: start, elapsed: func() time.Duration { return time.Since(start) }}
}

// Now returns the clock's time: its start plus the time elapsed since.
func (c *Clock) Now() time.Time { return c.start.Add(c.elapsed()) }
