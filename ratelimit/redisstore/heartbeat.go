package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

//go:embed heartbeat.lua
var heartbeatSource string

var heartbeatScript = rueidis.NewLuaScript(heartbeatSource)

// Heartbeat tuning: an instance beats every heartbeatEvery and counts as
// alive for heartbeatAlive after its last beat.
const (
	heartbeatEvery = time.Second
	heartbeatAlive = 3 * time.Second
)

// InstancesKey is the sorted set in which the stores sharing key_prefix
// record their heartbeats.
func InstancesKey(prefix string) string { return prefix + "lease:instances" }

// startHeartbeat starts the heartbeat loop, unless it runs or the
// gateway retired leases (RetireLeases), when the store decides a leased
// limit or a configuration with leased policies is loaded: stores without
// leases write nothing.
func (s *Store) startHeartbeat() {
	if s.beating.Load() {
		return
	}
	// The first beat is waited for, by every decision that comes while
	// it runs (within its timeout: startHeartbeatWithin), so that the
	// first batches are sized for the instances there are, not for one.
	s.hb.Lock()
	defer s.hb.Unlock()
	if s.beating.Load() || s.retired {
		return
	}
	s.beat(false)
	stop := make(chan struct{})
	if !s.goBackground(func() { s.heartbeatLoop(stop) }) {
		// Closed meanwhile: Close saw no heartbeat to end, so the beat
		// just made is taken back here.
		s.beat(true)
		return
	}
	s.hbStop = stop
	s.beating.Store(true)
}

// startHeartbeatWithin is startHeartbeat for a leased decision: it waits
// for the first beat only while ctx lasts. The beat has the looser bound
// of the calls off the request path, and against a Redis that stopped
// answering a decision that waited it out would wait past its timeout.
// Past ctx the decision's own call fails at once, and on_error decides.
//
// One goroutine starts it; the decisions that come meanwhile wait for
// that one (firstBeat), so a flood of them while Redis hangs makes no
// goroutine each.
func (s *Store) startHeartbeatWithin(ctx context.Context) {
	if s.beating.Load() {
		return
	}
	first := make(chan struct{})
	if s.firstBeat.CompareAndSwap(nil, &first) {
		started := s.goBackground(func() {
			defer func() {
				s.firstBeat.Store(nil)
				close(first)
			}()
			s.startHeartbeat()
		})
		if !started {
			s.firstBeat.Store(nil)
			return // closed: no beat to start
		}
	}
	p := s.firstBeat.Load()
	if p == nil {
		return // started (or refused, leases retired) meanwhile
	}
	select {
	case <-*p:
	case <-ctx.Done():
	}
}

// DeclareLeases starts the heartbeat, in the background, for a
// configuration with leased policies, so that this instance counts
// others, and is counted, before its first leased request: one restarted
// or idle on leases when Redis fails then falls back to limit / N rather
// than the whole limit, and no first decision waits for the first beat.
//
// A leased policy still deciding locally from before (Redis still down)
// reports its fallback again at its next local decision: the load may
// have made its gauge afresh.
func (s *Store) DeclareLeases() {
	s.hb.Lock()
	s.retired = false
	s.hb.Unlock()
	s.fallbacks.mu.Lock()
	s.fallbacks.declared++
	s.fallbacks.mu.Unlock()
	s.goBackground(s.startHeartbeat)
}

// RetireLeases stops the heartbeat, for a configuration without leased
// policies, and takes this instance out of the others' count at once: they
// would otherwise count it in N, and fall back to a smaller limit / N than
// the instances that lease, until it stopped. Until DeclareLeases, no
// leased decision starts it again (one still in flight from the
// configuration before would).
func (s *Store) RetireLeases() {
	s.hb.Lock()
	defer s.hb.Unlock()
	s.retired = true
	if !s.beating.Load() {
		return
	}
	close(s.hbStop)
	s.hbStop = nil
	s.beating.Store(false)
	s.beat(true)
	s.seen.Store(0)
	if s.o.OnInstances != nil {
		s.o.OnInstances(0)
	}
}

// Instances returns N, the instances seen alive at the last heartbeat
// (at least 1, this one); the fallback limit of a leased policy is
// limit / N.
func (s *Store) Instances() int { return s.instances() }

func (s *Store) instances() int { return max(int(s.seen.Load()), 1) }

func (s *Store) heartbeatLoop(stop <-chan struct{}) {
	tick := time.NewTicker(heartbeatEvery)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-stop:
			return
		case <-tick.C:
		}
		// Under hb, so that RetireLeases, which leaves the set, never
		// runs beside a beat that would put this instance back.
		s.hb.Lock()
		select {
		case <-stop:
			s.hb.Unlock()
			return
		default:
		}
		s.beat(false)
		s.hb.Unlock()
		s.resumeIdle()
	}
}

// beat records this instance (or, leaving, removes it) and updates N.
func (s *Store) beat(leaving bool) {
	c := s.client.Load()
	if c == nil || (s.br.open.Load() && !leaving) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(s.o.Timeout, 100*time.Millisecond))
	defer cancel()
	leave := "0"
	if leaving {
		leave = "1"
	}
	start := time.Now()
	reply, err := bounded(ctx, func() rueidis.RedisResult {
		return heartbeatScript.Exec(ctx, *c, []string{InstancesKey(s.prefix)}, []string{s.id, strconv.FormatInt(micros(heartbeatAlive), 10), leave})
	}).AsIntSlice()
	if err == nil && len(reply) != 2 {
		err = fmt.Errorf("decoding heartbeat reply: got %d values, want 2", len(reply))
	}
	s.observe(start, err)
	s.calls.Add(1)
	// A beat is a round trip like any: with leases, decisions rarely
	// reach Redis, and the beats keep Healthy current without pings.
	if err != nil {
		s.br.failed(err, false)
		return
	}
	s.br.succeeded()
	if leaving {
		return
	}
	n := max(reply[0], 1)
	prev := s.lastBeat.Swap(time.Now().UnixNano())
	if reply[1] == 1 && prev != 0 && time.Since(time.Unix(0, prev)) < heartbeatAlive {
		// Not in the set, though it beat less than a beat counts
		// ago: Redis lost the set with its data, and the instances
		// that have not beaten since are alive all the same. Each
		// beats within a second; until then N does not shrink.
		n = max(n, s.seen.Load())
	}
	if old := s.seen.Swap(n); n > old {
		// Each lease's share shrank: what is held past it goes back.
		s.trimLeases()
	}
	if s.o.OnInstances != nil {
		s.o.OnInstances(int(n))
	}
}
