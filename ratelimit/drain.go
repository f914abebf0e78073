package ratelimit

import (
	"context"
	"errors"
	"time"
)

// Drain is a shutdown as Wait sees it. Once Done is closed, a request
// whose departure, as it stands at that moment, is later than Deadline
// stops waiting at once with ErrDrained and gives its place back; the
// others keep their place. A departure moves earlier when a request ahead
// gives up, so only the store can tell where it stands.
type Drain struct {
	Done <-chan struct{}
	// Deadline is by when the shutdown cuts off; it is read once Done is
	// closed, and should carry a monotonic reading (see time.Now).
	Deadline func() time.Time
}

// ErrDrained is Wait's error for a request whose departure falls after
// the deadline of the Drain that began while it waited.
var ErrDrained = errors.New("the departure falls after the shutdown deadline")

type drainKey struct{}

// WithDrain returns ctx carrying d for Wait.
func WithDrain(ctx context.Context, d *Drain) context.Context {
	return context.WithValue(ctx, drainKey{}, d)
}

// DrainOf returns the Done channel of ctx's Drain (nil when it has none,
// so that a select on it never fires) and the Drain: for the stores'
// Wait.
func DrainOf(ctx context.Context) (<-chan struct{}, *Drain) {
	d, _ := ctx.Value(drainKey{}).(*Drain)
	if d == nil {
		return nil, nil
	}
	return d.Done, d
}

// Cuts reports whether a departure that lies after from away (a
// monotonic span) falls after d's deadline.
func (d *Drain) Cuts(after time.Duration) bool {
	return after > time.Until(d.Deadline())
}
