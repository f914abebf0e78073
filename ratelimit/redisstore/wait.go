package redisstore

import (
	"context"
	_ "embed"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/ratelimit"
)

//go:embed giveback.lua
var givebackSource string

var givebackScript = rueidis.NewLuaScript(givebackSource)

// Wait implements ratelimit.Store for the store that decided d, as its
// Ticket says. A request the Fallback admitted waits in the Fallback,
// which keeps its own queue. One Redis admitted sleeps in its own
// goroutine until d.Departure; when its ctx ends first it gives its
// departure slot back, if it is still the last in the queue, with one
// small script.
func (s *Store) Wait(ctx context.Context, r ratelimit.Request, d ratelimit.Decision) error {
	if d.Delay <= 0 || d.Departure.IsZero() {
		return ctx.Err()
	}
	if d.Ticket.Store != redisTicket {
		if s.fallback != nil {
			return s.fallback.Wait(ctx, r, d)
		}
		return ctx.Err()
	}
	if ctx.Err() == nil {
		timer := time.NewTimer(time.Until(d.Departure))
		defer timer.Stop()
		drained, drain := ratelimit.DrainOf(ctx)
	wait:
		for {
			select {
			case <-timer.C:
				return nil
			case <-drained:
				// Redis's departures do not move: d's still holds.
				drained = nil
				if drain.Cuts(time.Until(d.Departure)) {
					s.giveBack(r, d)
					return ratelimit.ErrDrained
				}
			case <-ctx.Done():
				break wait
			}
		}
	}
	s.giveBack(r, d)
	return ctx.Err()
}

// giveBack runs giveback.lua for a request that stopped waiting.
func (s *Store) giveBack(r ratelimit.Request, d ratelimit.Decision) {
	c := s.client.Load()
	if c == nil || s.br.open.Load() {
		return
	}
	// The tail token holds the decision's time, which the ticket keeps,
	// and the delay the script gave, which is the departure it wrote
	// less one interval: Delay may also hold the round trip (see
	// afterRoundTrip).
	decided := time.Unix(0, d.Ticket.At)
	scheduled := wrote(r.Policy, d) - r.Policy.Interval()
	dep := ""
	if s.o.CallerTime {
		dep = strconv.FormatInt(d.Departure.UnixMicro(), 10)
	}
	args := []string{
		s.tailToken(decided) + ":" + strconv.FormatInt(int64(scheduled/time.Microsecond), 10),
		strconv.FormatInt(micros(r.Policy.Interval()), 10),
		dep,
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.o.Timeout)
	defer cancel()
	start := time.Now()
	err := bounded(ctx, func() rueidis.RedisResult { return givebackScript.Exec(ctx, *c, []string{Key(s.prefix, r)}, args) }).Error()
	s.observe(start, err)
	if err != nil {
		s.br.failed(err, false)
		return
	}
	s.br.succeeded()
}
