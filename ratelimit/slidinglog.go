package ratelimit

import "time"

// SlidingLogState is the state of a sliding_window_log bucket: the times of
// its accepted requests that may still count, oldest first, in a ring that
// grows up to the policy's Limit. The zero value is an empty log. It is not
// safe for concurrent use; the store's lock guards it.
type SlidingLogState struct {
	ring []int64 // Unix ns; len(ring) is the capacity, a power of two or Limit
	head int     // index of the oldest entry
	n    int     // entries in use
}

// Len is the number of logged requests.
func (l *SlidingLogState) Len() int { return l.n }

func (l *SlidingLogState) at(i int) int64 { return l.ring[(l.head+i)%len(l.ring)] }

// StepSlidingWindowLog admits a request when fewer than Limit accepted
// requests lie in (now - Window, now], and logs it. Unlike the other steps it
// updates the log in place, and only when it admits n > 0 requests; entries
// that have left the window are dropped either way.
func StepSlidingWindowLog(p *Policy, l *SlidingLogState, now, n int64) Decision {
	if l.n > 0 {
		// Arrivals that race each other may bring times slightly out of
		// order; logging the later time keeps the log sorted and strict.
		now = max(now, l.at(l.n-1))
	}
	cutoff := now - p.window
	for l.n > 0 && l.ring[l.head] <= cutoff {
		l.head = (l.head + 1) % len(l.ring)
		l.n--
	}
	if l.n == 0 {
		l.head = 0
	}
	d := Decision{Limit: p.Limit}
	if int64(l.n)+n > p.Limit {
		d.RetryAfter = time.Duration(l.at(0) + p.window - now)
		d.Reset = time.Duration(l.at(l.n-1) + p.window - now)
		return d
	}
	for range n {
		l.push(now, p.Limit)
	}
	d.Allowed = true
	d.Remaining = p.Limit - int64(l.n)
	if l.n > 0 {
		d.Reset = time.Duration(l.at(l.n-1) + p.window - now)
		if d.Remaining == 0 {
			d.RetryAfter = time.Duration(l.at(0) + p.window - now)
		}
	}
	return d
}

// push appends t, growing the ring by doubling up to limit entries.
func (l *SlidingLogState) push(t int64, limit int64) {
	if l.n == len(l.ring) {
		size := min(max(2*len(l.ring), 4), int(limit))
		ring := make([]int64, size)
		for i := range l.n {
			ring[i] = l.at(i)
		}
		l.ring, l.head = ring, 0
	}
	l.ring[(l.head+l.n)%len(l.ring)] = t
	l.n++
}

func (l *SlidingLogState) newest() int64 { return l.at(l.n - 1) }

// pop removes the newest entry, giving back a request that was logged but
// then rejected by another limit.
func (l *SlidingLogState) pop() {
	if l.n > 0 {
		l.n--
	}
}

func (l *SlidingLogState) reset() { l.head, l.n = 0, 0 }
