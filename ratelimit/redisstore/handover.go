package redisstore

import (
	"sync"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
)

// departureHolder is a Fallback that can be told the departures Redis
// scheduled (ratelimit.MemoryStore is one).
type departureHolder interface {
	HoldDepartures(r ratelimit.Request, next time.Time)
}

// maxHandover bounds the leaky_bucket buckets whose Redis schedule a store
// remembers for its fallback.
const maxHandover = 1 << 16

// handover remembers, per leaky_bucket bucket this store decided on
// Redis, the next departure Redis had free after the store's latest
// request: when Redis fails, the fallback takes over from there instead of
// from an empty schedule while the requests Redis scheduled still leave.
// Entries go once that time has passed. It is safe for concurrent use; the
// zero value is ready.
type handover struct {
	mu    sync.Mutex
	next  map[string]int64 // bucket key -> Unix ns on the caller's clock
	swept time.Time        // when a full map was last swept
}

// record notes that Redis schedules the bucket key's next departure no
// earlier than next.
func (h *handover) record(key string, next, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.next == nil {
		h.next = make(map[string]int64)
	}
	if _, ok := h.next[key]; !ok && len(h.next) >= maxHandover {
		// Full: drop what has passed, at most once a second; a bucket
		// that finds no room is not handed over.
		if now.Sub(h.swept) < time.Second {
			return
		}
		h.swept = now
		t := now.UnixNano()
		for k, n := range h.next {
			if n <= t {
				delete(h.next, k)
			}
		}
		if len(h.next) >= maxHandover {
			return
		}
	}
	h.next[key] = max(h.next[key], next.UnixNano())
}

// take returns and forgets the bucket key's next departure on Redis when
// it is still ahead of now.
func (h *handover) take(key string, now time.Time) (time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n, ok := h.next[key]
	if !ok {
		return time.Time{}, false
	}
	delete(h.next, key)
	return time.Unix(0, n), n > now.UnixNano()
}
