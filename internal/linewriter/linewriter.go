// Package linewriter batches log lines on their way to a file, so that a
// request's access line costs no write system call of its own.
package linewriter

import (
	"io"
	"sync"
	"time"
)

// DefaultSize is how many bytes may wait before a write is forced.
const DefaultSize = 32 << 10

// Buffered collects whole lines and writes them to its destination in
// batches: at most Delay after the oldest waiting line arrived, as soon as
// Size bytes wait, and on Flush and Close. A line is never split between
// two writes. With a delay of 0 each line is written at once. It is safe
// for concurrent use; create it with New.
type Buffered struct {
	out  io.Writer
	size int

	wmu sync.Mutex // held while writing to out, so batches stay in order

	mu    sync.Mutex
	buf   []byte
	spare []byte
	delay time.Duration
	timer *time.Timer
	armed bool // the timer will flush what waits
	done  bool
}

// New returns a Buffered writing to out. size <= 0 means DefaultSize.
func New(out io.Writer, delay time.Duration, size int) *Buffered {
	if size <= 0 {
		size = DefaultSize
	}
	b := &Buffered{out: out, size: size, delay: max(delay, 0)}
	b.timer = time.AfterFunc(time.Hour, func() { b.Flush() })
	b.timer.Stop()
	return b
}

// SetDelay changes how long a line may wait; what waits is written out.
// The delay changes first: a line that comes while that write runs would
// otherwise arm the timer with the old delay, and wait for it.
func (b *Buffered) SetDelay(d time.Duration) {
	b.mu.Lock()
	b.delay = max(d, 0)
	b.mu.Unlock()
	b.Flush()
}

// Write queues p, which should be one or more whole lines.
func (b *Buffered) Write(p []byte) (int, error) {
	b.mu.Lock()
	if b.delay == 0 || b.done {
		b.mu.Unlock()
		b.wmu.Lock()
		defer b.wmu.Unlock()
		if err := b.flushLocked(); err != nil {
			return 0, err
		}
		return b.out.Write(p)
	}
	b.buf = append(b.buf, p...)
	full := len(b.buf) >= b.size
	if !full && !b.armed {
		b.armed = true
		b.timer.Reset(b.delay)
	}
	b.mu.Unlock()
	if full {
		return len(p), b.Flush()
	}
	return len(p), nil
}

// Flush writes every waiting line now.
func (b *Buffered) Flush() error {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	return b.flushLocked()
}

// flushLocked writes what waits; b.wmu must be held.
func (b *Buffered) flushLocked() error {
	b.mu.Lock()
	out := b.buf
	b.buf = b.spare[:0]
	b.spare = nil
	if b.armed {
		b.armed = false
		b.timer.Stop()
	}
	b.mu.Unlock()
	if len(out) == 0 {
		b.putSpare(out)
		return nil
	}
	_, err := b.out.Write(out)
	b.putSpare(out)
	return err
}

func (b *Buffered) putSpare(s []byte) {
	if cap(s) > 4*b.size {
		return // a burst grew it; let it go
	}
	b.mu.Lock()
	if b.spare == nil {
		b.spare = s[:0]
	}
	b.mu.Unlock()
}

// Close writes what waits; later lines are written at once.
func (b *Buffered) Close() error {
	b.mu.Lock()
	b.done = true
	b.mu.Unlock()
	return b.Flush()
}
