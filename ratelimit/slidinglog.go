package ratelimit

import "time"

// SlidingLogState is the state of a sliding_window_log bucket: the times of
// its accepted requests that may still count, oldest first, in a ring that
// grows up to the policy's Limit. The zero value is an empty log. It is not
// safe for concurrent use; the store's lock guards it.
type SlidingLogState struct {
	ring []int64 // Unix ns; len(ring) is the capacity, a power of two or Limit
	head int32   // index of the oldest entry
	n    int32   // entries in use
	// settled is the earliest arrival time that is judged exactly when it
	// arrives out of order: dropped entries all lie at or before
	// settled - Window. Zero before anything was dropped.
	settled int64
}

// Len is the number of logged requests.
func (l *SlidingLogState) Len() int { return int(l.n) }

func (l *SlidingLogState) at(i int32) int64 {
	return l.ring[(int(l.head)+int(i))%len(l.ring)]
}

func (l *SlidingLogState) newest() int64 { return l.at(l.n - 1) }

// StepSlidingWindowLog admits a request when fewer than Limit accepted
// requests lie in (now - Window, now], and logs it. Unlike the other steps it
// updates the log in place, and only when it admits n > 0 requests; entries
// that have left the window are dropped either way.
//
// Requests that race each other reach the log slightly out of order. A late
// one (now before the newest entry) is logged at the newest entry's time so
// the log stays sorted, and it is admitted only when fewer than Limit
// entries lie after now - Window and no dropped entry could still count
// for it, so admitted requests never exceed Limit in any window of their
// own arrival times.
func StepSlidingWindowLog(p *Policy, l *SlidingLogState, now, n int64) Decision {
	w := p.window
	if l.n > 0 && now < l.newest() {
		return l.stepLate(p, now, n)
	}
	if now < l.settled && n > 0 {
		// Late behind entries that are gone: nothing tells how many of
		// them its window holds, and any later retry arrives in order.
		wait := time.Duration(l.settled - now)
		return Decision{Limit: p.Limit, RetryAfter: wait, Reset: wait}
	}
	l.drop(now-w, w)
	d := Decision{Limit: p.Limit}
	if n > p.Limit {
		return d // never admissible, whatever the log holds
	}
	if int64(l.n)+n > p.Limit {
		d.RetryAfter = time.Duration(l.at(min(l.n+int32(n)-int32(p.Limit)-1, l.n-1)) + w - now)
		d.Reset = time.Duration(l.newest() + w - now)
		return d
	}
	for range n {
		l.push(now, p.Limit)
	}
	d.Allowed = true
	d.Remaining = p.Limit - int64(l.n)
	if l.n > 0 {
		// The budget grows when the oldest entry leaves the window.
		d.RetryAfter = time.Duration(l.at(0) + w - now)
		d.Reset = time.Duration(l.newest() + w - now)
	}
	return d
}

// stepLate decides a request that arrives before the newest entry.
func (l *SlidingLogState) stepLate(p *Policy, now, n int64) Decision {
	w := p.window
	newest := l.newest()
	// Entries after now-w count for windows that hold now.
	first := l.n
	for first > 0 && l.at(first-1) > now-w {
		first--
	}
	count := int64(l.n - first)
	oldest := l.at(first) // exists: newest > now > now-w
	d := Decision{Limit: p.Limit, Reset: time.Duration(newest + w - now)}
	if now < l.settled || count+n > p.Limit {
		// A retry arrives in order: it needs the entries that still count
		// at newest to number below Limit.
		alive := l.n
		for alive > 0 && l.at(l.n-alive) <= newest-w {
			alive--
		}
		retry := newest
		if k := int64(alive) + n - p.Limit; k > 0 {
			retry = l.at(l.n-alive+int32(min(k-1, int64(alive-1)))) + w
		}
		d.RetryAfter = time.Duration(retry - now)
		return d
	}
	if n > 0 {
		// Entries at or before now-w count for no later request.
		l.drop(now-w, w)
		for range n {
			l.push(newest, p.Limit)
		}
	}
	d.Allowed = true
	d.Remaining = p.Limit - count - n
	d.RetryAfter = time.Duration(oldest + w - now)
	return d
}

// drop removes the entries at or before cutoff, w being the window.
func (l *SlidingLogState) drop(cutoff, w int64) {
	for l.n > 0 && l.ring[l.head] <= cutoff {
		l.settled = l.ring[l.head] + w
		l.head = int32((int(l.head) + 1) % len(l.ring))
		l.n--
	}
	if l.n == 0 {
		l.head = 0
	}
}

// push appends t, growing the ring by doubling up to limit entries.
func (l *SlidingLogState) push(t int64, limit int64) {
	if int(l.n) == len(l.ring) {
		size := min(max(2*len(l.ring), 4), int(limit))
		ring := make([]int64, size)
		for i := range l.n {
			ring[i] = l.at(i)
		}
		l.ring, l.head = ring, 0
	}
	l.ring[(int(l.head)+int(l.n))%len(l.ring)] = t
	l.n++
}

// pop removes the newest entry, giving back a request that was logged but
// then rejected by another limit.
func (l *SlidingLogState) pop() {
	if l.n > 0 {
		l.n--
	}
}

func (l *SlidingLogState) reset() { l.head, l.n, l.settled = 0, 0, 0 }
