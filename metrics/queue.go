package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Queue holds the metric children of one leaky_bucket policy's FIFO. Its
// methods do not allocate. It is safe for concurrent use.
type Queue struct {
	depth prometheus.Gauge
	wait  prometheus.Observer
}

// Queue returns the handles for the queue of policy. Calling it again for
// the same policy, on a reload, returns handles to the same series, so
// requests still waiting under the old configuration leave the gauge right.
func (m *Metrics) Queue(policy string) *Queue {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	m.policies[policy] = struct{}{}
	m.queues[policy] = struct{}{}
	m.mu.Unlock()
	return &Queue{
		depth: m.queueDepth.WithLabelValues(policy),
		wait:  m.queueWait.WithLabelValues(policy),
	}
}

// Enter counts a request that starts waiting in the queue.
func (q *Queue) Enter() {
	if q != nil {
		q.depth.Inc()
	}
}

// Leave counts a request that stops waiting, toward the upstream or because
// its client went away, after waiting for wait. Every Enter needs one Leave.
func (q *Queue) Leave(wait time.Duration) {
	if q == nil {
		return
	}
	q.depth.Dec()
	q.wait.Observe(wait.Seconds())
}

// Store holds the metric children of one limiter store. Its methods do not
// allocate. It is safe for concurrent use.
type Store struct {
	duration prometheus.Observer
	errors   prometheus.Counter
}

// Store returns the handles for the store called name: "memory" or
// "redis".
func (m *Metrics) Store(name string) *Store {
	if m == nil {
		return nil
	}
	return &Store{
		duration: m.storeDuration.WithLabelValues(name),
		errors:   m.storeErrors.WithLabelValues(name),
	}
}

// Observe counts one store operation that took d and failed when err is
// not nil.
func (s *Store) Observe(d time.Duration, err error) {
	if s == nil {
		return
	}
	s.duration.Observe(d.Seconds())
	if err != nil {
		s.errors.Inc()
	}
}
