package redisstore

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// Breaker tuning. After breakerFailures consecutive failures the store
// stops sending decisions to Redis; the prober then pings it after
// breakerMinBackoff, doubling up to breakerMaxBackoff, and closes the
// breaker on the first answer. The cap keeps "Redis is back" to shared
// decisions within about a second.
const (
	breakerFailures   = 3
	breakerMinBackoff = 250 * time.Millisecond
	breakerMaxBackoff = time.Second
	// idlePing is how often the prober checks Redis while no decision has
	// succeeded recently, so Healthy stays true to life without traffic.
	idlePing = time.Second
)

// breaker counts consecutive failures and holds decisions off Redis while
// open. Its zero value is not ready; call init. It is safe for concurrent
// use: the hot path reads only atomics.
type breaker struct {
	open     atomic.Bool
	healthy  atomic.Bool
	failures atomic.Int32
	lastOK   atomic.Int64 // Unix ns of the last success
	wake     chan struct{}

	mu      sync.Mutex
	lastErr error
	backoff time.Duration
}

func (b *breaker) init() {
	b.wake = make(chan struct{}, 1)
	b.backoff = breakerMinBackoff
	b.healthy.Store(true)
}

// succeeded records an answered round trip.
func (b *breaker) succeeded() {
	b.lastOK.Store(time.Now().UnixNano())
	if b.failures.Load() != 0 {
		b.failures.Store(0)
	}
	if !b.healthy.Load() {
		b.mu.Lock()
		b.lastErr = nil
		b.mu.Unlock()
		b.healthy.Store(true)
	}
}

// failed records a failed round trip; force opens the breaker at once.
// A server that answers OOM (maxmemory reached with noeviction) is up:
// its scripts still decide every limit that writes nothing, rejections
// of spent buckets included, so the error opens no breaker. Otherwise a
// flood of fresh keys, which any client can send, would move every
// bucket of the gateway to the on_error fallback. Being an answer, it
// also ends a run of failures: were it to leave the count as it stands,
// round trips that time out now and then, among the OOM answers of a
// flood that lasts, would add up to an open breaker. The same holds for a
// cluster slot being migrated (resharding): the scripts of its buckets
// fail until their keys have moved, while every other slot answers.
func (b *breaker) failed(err error, force bool) {
	b.mu.Lock()
	b.lastErr = err
	b.mu.Unlock()
	if !force && (isOOMReply(err) || isSlotMoving(err)) {
		if b.failures.Load() != 0 {
			b.failures.Store(0)
		}
		return
	}
	b.healthy.Store(false)
	if n := b.failures.Add(1); (n >= breakerFailures || force) && !b.open.Swap(true) {
		select {
		case b.wake <- struct{}{}:
		default:
		}
	}
}

// probeLoop closes an open breaker once Redis answers again, connects a
// store that could not connect at start, and pings an idle Redis.
func (s *Store) probeLoop() {
	defer close(s.done)
	b := &s.br
	idle := time.NewTicker(idlePing)
	defer idle.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-b.wake:
			if b.open.Load() && s.o.Logger != nil {
				s.o.Logger.Warn("redis unreachable: deciding without it until it answers", "on_error", s.o.OnError, "err", s.LastError())
			}
		case <-idle.C:
			if b.open.Load() || time.Since(time.Unix(0, b.lastOK.Load())) < idlePing {
				continue
			}
			// Idle and closed: one ping keeps Healthy current.
			if err := s.ping(s.looseTimeout()); err != nil {
				b.failed(err, false)
			} else {
				b.succeeded()
			}
			continue
		}
		// Open: ping with growing backoff until Redis answers.
		for b.open.Load() {
			b.mu.Lock()
			wait := b.backoff
			b.backoff = min(2*b.backoff, breakerMaxBackoff)
			b.mu.Unlock()
			select {
			case <-s.stop:
				return
			case <-time.After(wait):
			}
			if err := s.probe(); err != nil {
				b.failed(err, false)
				continue
			}
			b.mu.Lock()
			b.backoff = breakerMinBackoff
			b.mu.Unlock()
			b.succeeded()
			b.open.Store(false)
			if s.o.Logger != nil {
				s.o.Logger.Info("redis answers again")
			}
		}
	}
}

// ping checks that Redis answers, connecting first if need be, within d
// (a connection being made again, after a restart, takes a handshake and
// more than one round trip inside it).
func (s *Store) ping(d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	if err := s.connect(ctx); err != nil {
		s.observe(start, err)
		return err
	}
	c := *s.client.Load()
	err := bounded(ctx, func() rueidis.RedisResult { return c.Do(ctx, c.B().Ping().Build()) }).Error()
	s.observe(start, err)
	return err
}

// probe checks, for an open breaker, that Redis answers as a decision
// needs: a PING with room for reconnecting, then, the connection made, a
// second one within a decision's timeout. A Redis that answers later than
// that would answer no decision in time, and closing the breaker on it
// would send all traffic back to wait out the timeout, again and again.
// Last, a script that writes must run: a replica (READONLY), a user not
// allowed the scripts (NOPERM) or a cluster that is down answers PING
// but no decision, and closing the breaker on it would flap it.
func (s *Store) probe() error {
	if err := s.ping(s.probeTimeout()); err != nil {
		return err
	}
	if err := s.ping(s.o.Timeout); err != nil {
		return err
	}
	s.loadScripts()
	err := s.probeWrite()
	if isReadOnlyReply(err) {
		// A server demoted in place while the address moved to the new
		// primary (a managed service's failover): the next probe
		// connects again, to whatever the address names now.
		s.redial()
	}
	return err
}

// redial drops the client; the next round trip that needs one connects
// anew (see connect).
func (s *Store) redial() {
	if c := s.client.Swap(nil); c != nil {
		(*c).Close()
	}
}

// probeSource deletes a key that nobody writes: it changes nothing, but
// Redis refuses it where it refuses the decisions' writes.
const probeSource = "return redis.call('DEL', KEYS[1])"

var probeScript = rueidis.NewLuaScript(probeSource)

// probeWrite runs probeScript on {prefix}probe. An OOM or a slot being
// migrated refuses only some writes (see failed): Redis answers.
func (s *Store) probeWrite() error {
	c := *s.client.Load() // connected: ping succeeded
	ctx, cancel := context.WithTimeout(context.Background(), s.probeTimeout())
	defer cancel()
	start := time.Now()
	err := bounded(ctx, func() rueidis.RedisResult {
		return probeScript.Exec(ctx, c, []string{s.prefix + "probe"}, nil)
	}).Error()
	if isOOMReply(err) || isSlotMoving(err) {
		err = nil
	}
	s.observe(start, err)
	return err
}

// scriptSources are the sources of every script the store runs.
var scriptSources = []string{commonSource + decideSource, resetSource, holdSource, heartbeatSource, commonSource + leaseSource, givebackSource, probeSource}

// loadScripts loads every script into every node, before the breaker
// closes. A Redis that restarted has none, and a script's first call is
// then EVALSHA, NOSCRIPT and EVAL: two round trips within a decision's
// timeout, which a Redis slower than half of it never answers in time,
// so no decision would ever succeed. It is best effort: a node that
// fails to load one leaves that script to its first call.
func (s *Store) loadScripts() {
	c := s.client.Load()
	if c == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.probeTimeout())
	defer cancel()
	for _, node := range (*c).Nodes() {
		cmds := make(rueidis.Commands, 0, len(scriptSources))
		for _, src := range scriptSources {
			cmds = append(cmds, node.B().ScriptLoad().Script(src).Build())
		}
		node.DoMulti(ctx, cmds...)
	}
}

// looseTimeout bounds the round trips made off the request path:
// heartbeats and idle pings.
func (s *Store) looseTimeout() time.Duration { return max(s.o.Timeout, 100*time.Millisecond) }

// probeTimeout bounds a probe's first PING and its script loads: a
// connection made again takes a dial, a HELLO and the PING, and no
// request waits on the probe.
func (s *Store) probeTimeout() time.Duration { return max(4*s.o.Timeout, 250*time.Millisecond) }

// isOOMReply reports whether err carries Redis's OOM error reply.
func isOOMReply(err error) bool {
	var re *rueidis.RedisError
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "OOM ")
}

// isReadOnlyReply reports whether err carries Redis's READONLY error
// reply: the server is a replica.
func isReadOnlyReply(err error) bool {
	var re *rueidis.RedisError
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "READONLY ")
}

// isSlotMoving reports whether err is Redis Cluster's answer to a script
// on a bucket whose slot is being migrated: TRYAGAIN (some of its
// declared keys have moved, others not), or a script that reached a key
// of the bucket (a sliding log's settled time, a block, an identity) that
// the node no longer holds.
func isSlotMoving(err error) bool {
	var re *rueidis.RedisError
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	return strings.HasPrefix(msg, "TRYAGAIN") || strings.Contains(msg, "non local key")
}

func netDialer(timeout time.Duration) net.Dialer {
	return net.Dialer{Timeout: timeout, KeepAlive: time.Second}
}
