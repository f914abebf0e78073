package simulate

import (
	"context"
	"math"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
)

// departureSlack is how near its departure a waiter may give up and still
// count as gone at the departure itself, as the gateway saw it: a log
// keeps microseconds, and the replay decides a request at its arrival
// where the gateway decided it a moment later, so the two instants land
// this far apart.
const departureSlack = int64(time.Millisecond)

// waiter is a request waiting in a leaky_bucket queue of a consumer that
// has requests that give up (see Request.GiveUp).
type waiter struct {
	dep   int64 // departure; one interval earlier for each give-up ahead
	leave int64 // when its client goes away; math.MaxInt64 for never
	gone  bool  // it left the queue
	q     *waitQueue
}

// waitQueue is one bucket's waiters, in departure order.
type waitQueue struct {
	req ratelimit.Request
	ws  []*waiter
}

// bucketID names a consumer's bucket of one of a lane's policies.
type bucketID struct {
	consumer int32
	override uint16
}

// event is a waiter's departure, or its client going away.
type event struct {
	at     int64
	w      *waiter
	giveUp bool
}

// queues follows the waiters of the consumers that have requests that give
// up, which the gateway's store moves when one gives up its place: every
// waiter behind it, and the bucket's next departure, one interval earlier.
// The other consumers' departures stay on the lane's plain heap.
type queues struct {
	tracked []bool // by consumer
	byID    map[bucketID]*waitQueue
	events  []event // a min-heap by at
}

// newQueues returns nil when no request of tr gives up.
func newQueues(tr *Traffic) *queues {
	var qs *queues
	for _, r := range tr.Requests {
		if r.GiveUp > 0 {
			if qs == nil {
				qs = &queues{tracked: make([]bool, len(tr.Keys)), byID: map[bucketID]*waitQueue{}}
			}
			qs.tracked[r.Consumer] = true
		}
	}
	return qs
}

// wait queues a request admitted at at with departure dep.
func (qs *queues) wait(rq Request, req ratelimit.Request, at, dep int64) {
	id := bucketID{rq.Consumer, rq.Override}
	q := qs.byID[id]
	if q == nil {
		q = &waitQueue{req: req}
		qs.byID[id] = q
	}
	w := &waiter{dep: dep, leave: math.MaxInt64, q: q}
	q.ws = append(q.ws, w)
	qs.push(event{at: dep, w: w})
	if rq.GiveUp > 0 {
		w.leave = at + int64(rq.GiveUp)
		qs.push(event{at: w.leave, w: w, giveUp: true})
	}
}

// next returns the time of the earliest event; math.MaxInt64 for none.
func (qs *queues) next() int64 {
	if qs == nil || len(qs.events) == 0 {
		return math.MaxInt64
	}
	return qs.events[0].at
}

// handle takes the earliest event. It reports a departure that reaches the
// upstream (left), one that does not (dropped: its client went away before
// it could leave), or neither for an event no longer due.
func (qs *queues) handle(store *ratelimit.MemoryStore, origin time.Time) (ev event, left, dropped bool, err error) {
	ev = qs.pop()
	w := ev.w
	switch {
	case w.gone:
		return ev, false, false, nil
	case !ev.giveUp && ev.at != w.dep:
		return ev, false, false, nil // moved earlier since
	case !ev.giveUp:
		// At its departure; a client gone by then (give or take the
		// slack) leaves its place spent, as the gateway's does.
		w.gone = true
		w.q.remove(w)
		if w.leave <= w.dep+departureSlack {
			return ev, false, true, nil
		}
		return ev, true, false, nil
	case ev.at >= w.dep-departureSlack:
		return ev, false, false, nil // its departure decides
	}
	// Given up ahead of its departure: the place goes to those behind.
	q := w.q
	t := int64(q.req.Policy.Interval())
	next := q.ws[len(q.ws)-1].dep + t
	i := q.index(w)
	for _, o := range q.ws[i+1:] {
		o.dep -= t
		qs.push(event{at: o.dep, w: o})
	}
	w.gone = true
	q.remove(w)
	err = handDown(store, origin.Add(time.Duration(ev.at)), q.req, origin.Add(time.Duration(next-t)))
	return ev, false, true, err
}

// handDown makes the bucket of r schedule its next departure at next, one
// interval earlier than it does, as the gateway's store does when a waiter
// gives up its place (ratelimit.MemoryStore.Wait). The store offers no
// call for that alone: the bucket is reset, told to schedule from next,
// and blocked again if it was.
func handDown(store *ratelimit.MemoryStore, now time.Time, r ratelimit.Request, next time.Time) error {
	ctx := context.Background()
	d, err := store.Peek(ctx, now, r)
	if err != nil {
		return err
	}
	if err := store.Reset(ctx, r); err != nil {
		return err
	}
	store.HoldDepartures(r, next)
	if d.Blocked {
		store.BlockUntil(r, now.Add(d.RetryAfter))
	}
	return nil
}

func (q *waitQueue) index(w *waiter) int {
	for i, o := range q.ws {
		if o == w {
			return i
		}
	}
	return -1
}

func (q *waitQueue) remove(w *waiter) {
	if i := q.index(w); i >= 0 {
		q.ws = append(q.ws[:i], q.ws[i+1:]...)
	}
}

func (qs *queues) push(e event) {
	qs.events = append(qs.events, e)
	s := qs.events
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if s[p].at <= s[i].at {
			break
		}
		s[p], s[i] = s[i], s[p]
		i = p
	}
}

func (qs *queues) pop() event {
	s := qs.events
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s[last] = event{}
	s = s[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(s) && s[l].at < s[m].at {
			m = l
		}
		if r < len(s) && s[r].at < s[m].at {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	qs.events = s
	return top
}
