// Package redisstore keeps rate-limit state in Redis so that every gateway
// instance draws on one budget.
//
// Each decision is one Lua script that mirrors the ratelimit package's step
// functions and covers every limit of the request, so in standalone and
// sentinel mode a request costs one round trip whatever the number of
// limits, and a request that one limit rejects takes nothing from the
// others. A leased policy (ratelimit.SyncLease) is decided instead from a
// batch of its budget that the instance holds, taken from Redis by one
// script call now and then (lease.go). Time comes from the Redis server,
// so instances whose clocks disagree still agree on the budget. When Redis fails, the store follows
// its OnError choice and a circuit breaker stops it from trying for a short
// while; see "Several instances" in README.md.
package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/ratelimit"
)

// The Redis topologies Options.Mode accepts.
const (
	Standalone = "standalone"
	Cluster    = "cluster"
	Sentinel   = "sentinel"
)

// The failure behaviours Options.OnError accepts.
const (
	// OnErrorLocal decides with Options.Fallback, an in-process store.
	OnErrorLocal = "local"
	// OnErrorAllow admits every request.
	OnErrorAllow = "allow"
	// OnErrorDeny rejects every request with a one-second retry.
	OnErrorDeny = "deny"
)

// Options configure a Store. Only Addresses is required.
type Options struct {
	// Mode is the Redis topology: "standalone" (default), "cluster" or
	// "sentinel". Standalone uses the first of Addresses.
	Mode string
	// Addresses are host:port pairs: the server, cluster seed nodes, or the
	// sentinels.
	Addresses []string
	// MasterName is the master set the sentinels watch (sentinel mode).
	MasterName string
	// Username and Password authenticate to Redis (ACL or requirepass).
	Username, Password string
	// SentinelUsername and SentinelPassword authenticate to the sentinels,
	// when they require it.
	SentinelUsername, SentinelPassword string
	// DB is the database number (standalone and sentinel).
	DB int
	// KeyPrefix starts every key, exactly as given: "" writes keys with no
	// prefix at all. Configurations default it to DefaultKeyPrefix.
	KeyPrefix string
	// Timeout bounds each decision's Redis round trips. Default 50ms.
	Timeout time.Duration
	// OnError is what a decision does when Redis fails or the breaker is
	// open: "local" (default), "allow" or "deny".
	OnError string
	// Fallback decides when OnError is "local". When nil, New creates a
	// MemoryStore that Close stops. A Fallback with a HoldDepartures
	// method, as MemoryStore has, takes a leaky_bucket over where Redis's
	// schedule stood, so the requests Redis scheduled leave before the
	// first the fallback admits.
	Fallback ratelimit.Store
	// CallerTime makes decisions use the now passed to Decide instead of the
	// Redis server's TIME; for tests with virtual clocks (the conformance
	// suite). It also lengthens key TTLs by CallerTimeSlack, since Redis
	// expires keys on its own clock.
	CallerTime bool
	// Observe, if set, is called once per Redis round trip with its
	// duration and error (nil on success), from the calling goroutine. It
	// must be safe for concurrent use.
	Observe func(d time.Duration, err error)
	// OnLease, if set, is called once per Redis round trip of a leased
	// policy (sync: lease) with the policy's name and the result:
	// "granted" (one unit or more), "exhausted" (none), "returned" (a
	// give-back) or "error". It must be safe for concurrent use.
	OnLease func(policy, result string)
	// OnLeaseFallback, if set, is called when a leased policy starts
	// (true) or stops (false) deciding locally with limit / N.
	OnLeaseFallback func(policy string, on bool)
	// OnInstances, if set, is called with N, the instances seen alive,
	// after each heartbeat; heartbeats run once a leased policy is used.
	OnInstances func(n int)
	// Logger receives the "lease fallback" and "lease resumed" lines, and
	// a warning when Redis evicts keys once full; nil writes none.
	Logger *slog.Logger
}

// DefaultKeyPrefix is the key_prefix of a configuration that sets none.
const DefaultKeyPrefix = "sluice:"

// CallerTimeSlack is added to every key TTL when Options.CallerTime is set.
const CallerTimeSlack = 5 * time.Minute

// Store is a ratelimit.Store backed by Redis. It is safe for concurrent use.
// Create it with New and release it with Close.
type Store struct {
	o        Options
	client   atomic.Pointer[rueidis.Client] // nil until a connection succeeds, and after redial
	prefix   string
	slack    string // extra TTL in ms, as the scripts take it
	id       string // random, makes log members and queue tokens unique
	seq      atomic.Uint64
	cluster  bool
	fallback ratelimit.Store
	ownsFall bool
	handover handover // Redis's leaky_bucket schedules, for the fallback

	br breaker

	leases    leaseTable                    // sync: lease budgets held by this instance
	fallbacks leaseFallbacks                // leased policies deciding locally
	seen      atomic.Int64                  // instances alive at the last heartbeat
	lastBeat  atomic.Int64                  // Unix ns of the last beat answered, 0 before the first
	beating   atomic.Bool                   // the heartbeat loop runs
	firstBeat atomic.Pointer[chan struct{}] // closed once the start under way is over; nil when none is
	hb        sync.Mutex                    // starts and stops it
	hbStop    chan struct{}                 // stops it; guarded by hb
	retired   bool                          // RetireLeases came last, not DeclareLeases; guarded by hb
	// life orders goroutines started after New (the heartbeat, which a
	// reload may start) against Close: none is added to bg once closed
	// is set.
	life    sync.Mutex
	closed  bool
	calls   atomic.Int64   // Redis round trips of leases and heartbeats
	bg      sync.WaitGroup // the lease sweep and heartbeats
	refills sync.WaitGroup // background lease refills; added to by goRefill only
	// bgCtx ends when Close begins: late replies are no longer awaited.
	bgCtx    context.Context
	bgCancel context.CancelFunc

	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once

	// evictionChecked is set once checkEviction has run.
	evictionChecked atomic.Bool

	// closeWaited, when set (by tests), is called by Close once it has
	// waited for the background work, before it gives the leases back.
	closeWaited func()
}

var _ ratelimit.Store = (*Store)(nil)

// New checks o, connects to Redis and starts the store's health prober.
// It fails only on invalid options: when Redis is unreachable the store
// starts unhealthy, follows OnError, and keeps trying to connect in the
// background.
func New(ctx context.Context, o Options) (*Store, error) {
	if o.Mode == "" {
		o.Mode = Standalone
	}
	if o.Timeout == 0 {
		o.Timeout = 50 * time.Millisecond
	}
	if o.OnError == "" {
		o.OnError = OnErrorLocal
	}
	var errs []error
	switch o.Mode {
	case Standalone, Cluster:
	case Sentinel:
		if o.MasterName == "" {
			errs = append(errs, errors.New("master_name: required in sentinel mode"))
		}
	default:
		errs = append(errs, fmt.Errorf("mode: unknown mode %q (want standalone, cluster or sentinel)", o.Mode))
	}
	if len(o.Addresses) == 0 {
		errs = append(errs, errors.New("addresses: must not be empty"))
	}
	if o.Timeout < 0 {
		errs = append(errs, errors.New("timeout: must be > 0"))
	}
	switch o.OnError {
	case OnErrorLocal, OnErrorAllow, OnErrorDeny:
	default:
		errs = append(errs, fmt.Errorf("on_error: unknown value %q (want local, allow or deny)", o.OnError))
	}
	if o.DB < 0 {
		errs = append(errs, errors.New("db: must be >= 0"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var idb [6]byte
	_, _ = rand.Read(idb[:])
	s := &Store{
		o:       o,
		prefix:  o.KeyPrefix,
		id:      hex.EncodeToString(idb[:]),
		cluster: o.Mode == Cluster,
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	s.bgCtx, s.bgCancel = context.WithCancel(context.Background())
	s.slack = "0"
	if o.CallerTime {
		s.slack = fmt.Sprint(CallerTimeSlack.Milliseconds())
	}
	s.fallback = o.Fallback
	if s.fallback == nil && o.OnError == OnErrorLocal {
		s.fallback = ratelimit.NewMemoryStore(ratelimit.MemoryOptions{})
		s.ownsFall = true
	}
	s.br.init()
	if err := s.connect(ctx); err != nil {
		s.br.failed(err, true)
	}
	go s.probeLoop()
	s.bg.Add(1)
	go s.leaseLoop()
	return s, nil
}

// clientOption translates the options into rueidis terms.
func (s *Store) clientOption() rueidis.ClientOption {
	o := s.o
	co := rueidis.ClientOption{
		InitAddress:  slices.Clone(o.Addresses), // ShuffleInit shuffles in place
		Username:     o.Username,
		Password:     o.Password,
		SelectDB:     o.DB,
		DisableCache: true, // no client-side caching: every read is a script
		DisableRetry: true, // a script that takes budget must never run twice
		ShuffleInit:  true,
		Dialer:       netDialer(max(o.Timeout, time.Second)),
		// A server that stops answering is noticed within a second, and
		// the connection is redialled.
		ConnWriteTimeout: max(10*o.Timeout, time.Second),
	}
	switch o.Mode {
	case Standalone:
		co.InitAddress = o.Addresses[:1]
		co.ForceSingleClient = true
	case Sentinel:
		co.Sentinel = rueidis.SentinelOption{
			MasterSet: o.MasterName,
			Username:  o.SentinelUsername,
			Password:  o.SentinelPassword,
			Dialer:    netDialer(max(o.Timeout, time.Second)),
		}
	}
	return co
}

// connect creates the Redis client; the first success is kept.
func (s *Store) connect(ctx context.Context) error {
	if s.client.Load() != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, max(s.o.Timeout, time.Second))
	defer cancel()
	type result struct {
		c   rueidis.Client
		err error
	}
	ch := make(chan result, 1)
	go func() {
		c, err := rueidis.NewClient(s.clientOption())
		ch <- result{c, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return fmt.Errorf("connecting to redis %v: %w", s.o.Addresses, r.err)
		}
		if !s.install(r.c) {
			return nil
		}
		if s.evictionChecked.CompareAndSwap(false, true) {
			// Once: a connection made again (see redial) warns no more.
			go s.checkEviction(r.c)
		}
		return nil
	case <-ctx.Done():
		// Close a client that connects after all, so it does not leak.
		go func() {
			if r := <-ch; r.err == nil {
				s.install(r.c)
			}
		}()
		return fmt.Errorf("connecting to redis %v: %w", s.o.Addresses, ctx.Err())
	}
}

// install makes c the store's client, unless it has one already or Close
// has begun, and reports whether it did; a client it does not install it
// closes. A connection may be made after the bound connect waits for, and
// after Close: installed then, it would never be closed.
func (s *Store) install(c rueidis.Client) bool {
	s.life.Lock()
	defer s.life.Unlock()
	if s.closed || !s.client.CompareAndSwap(nil, &c) {
		c.Close()
		return false
	}
	return true
}

// checkEviction warns when Redis evicts keys once it is full: a client
// that sends fresh key values can then push live buckets and blocks out,
// which come back fresh (README, "Redis memory"). Managed services that
// refuse CONFIG are left unchecked.
func (s *Store) checkEviction(c rueidis.Client) {
	if s.o.Logger == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(s.o.Timeout, time.Second))
	defer cancel()
	kv, err := c.Do(ctx, c.B().ConfigGet().Parameter("maxmemory-policy").Build()).AsStrMap()
	if err != nil {
		return
	}
	if p, ok := kv["maxmemory-policy"]; ok && p != "noeviction" {
		s.o.Logger.Warn("redis evicts keys when full: a flood of fresh keys can evict live buckets and blocks, which then come back fresh; set maxmemory-policy noeviction", "maxmemory_policy", p)
	}
}

// Healthy reports whether Redis answered the store's last round trip: it is
// false while Redis is unreachable and while the breaker is open.
func (s *Store) Healthy() bool { return s.br.healthy.Load() }

// LastError returns the most recent Redis failure, or nil after a success.
func (s *Store) LastError() error {
	s.br.mu.Lock()
	defer s.br.mu.Unlock()
	return s.br.lastErr
}

// Close stops the prober and the lease work, gives back the unspent units
// of every lease (one pipelined batch, bounded by Timeout), and closes the
// Redis client, and the fallback store when New created it.
func (s *Store) Close() error {
	s.life.Lock()
	s.closed = true
	s.life.Unlock()
	s.bgCancel()
	s.stopOnce.Do(func() { close(s.stop) })
	<-s.done
	s.bg.Wait()
	s.refills.Wait()
	if s.closeWaited != nil {
		s.closeWaited()
	}
	if c := s.client.Load(); c != nil {
		if ls := s.leases.all(); len(ls) > 0 && !s.br.open.Load() {
			ctx, cancel := context.WithTimeout(context.Background(), s.o.Timeout)
			s.returnLeases(ctx, *c, ls)
			cancel()
		}
		// Under hb: a heartbeat that starts just now is either seen
		// here or takes its own beat back (startHeartbeat).
		s.hb.Lock()
		beating := s.beating.Load()
		s.hb.Unlock()
		if beating {
			s.beat(true)
		}
		(*c).Close()
	}
	if s.ownsFall {
		return s.fallback.Close()
	}
	return nil
}

// observe reports one round trip. One whose caller went away (its
// client left mid-decision) is no failure of Redis: it is timed, not
// counted as failed. A call that ran out of the store's timeout is.
func (s *Store) observe(start time.Time, err error) {
	if s.o.Observe != nil {
		if errors.Is(err, context.Canceled) {
			err = nil
		}
		s.o.Observe(time.Since(start), err)
	}
}

// goRefill runs f, a lease's call, on a goroutine Close waits for before
// it gives the leases back, unless the store is closed, and reports
// whether it did. Under life, as goBackground: a request or the first
// heartbeat beat (neither of which Close waits for) may start a call
// while Close runs, and one started after Close has waited would outlive
// it.
func (s *Store) goRefill(f func()) bool { return s.goOn(&s.refills, f) }

// goBackground runs f on a goroutine Close waits for, unless the store is
// closed, and reports whether it did.
func (s *Store) goBackground(f func()) bool { return s.goOn(&s.bg, f) }

// goOn runs f on a goroutine counted in wg, unless the store is closed,
// and reports whether it did. Under life: Close sets closed under it
// before it waits for wg.
func (s *Store) goOn(wg *sync.WaitGroup, f func()) bool {
	s.life.Lock()
	defer s.life.Unlock()
	if s.closed {
		return false
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		f()
	}()
	return true
}
