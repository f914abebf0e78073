// Package server runs sluice: it loads the configuration, builds the limit
// store, serves the plain, TLS and admin listeners, reloads on SIGHUP and
// drains on SIGTERM.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/certs"
	"github.com/sluicehq/sluice/internal/linewriter"
	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/proxy"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/ratelimit/redisstore"
	"github.com/sluicehq/sluice/routes"
)

// Server is one running gateway. Create it with New, then Serve; it is
// safe for concurrent use.
type Server struct {
	path    string
	log     *slog.Logger
	metrics *metrics.Metrics
	gateway *proxy.Gateway
	clock   *ratelimit.Clock     // the time of every decision, immune to wall clock steps
	access  *linewriter.Buffered // nil: access lines go through log

	mu      sync.Mutex // serialises Reload and Shutdown
	cfg     atomic.Pointer[routes.Config]
	store   ratelimit.Store
	memory  *ratelimit.MemoryStore // the store itself, or Redis's local fallback
	redis   *redisstore.Store      // nil unless store.type is redis
	certs   *certs.Manager         // nil without tls
	servers []*http.Server         // the plain and TLS listeners
	admin   *http.Server           // nil without an admin listener
	addrs   map[string]net.Addr    // listener name -> bound address
	// started is the configuration the server was built with, whose
	// listeners, store and certificate management run until a restart:
	// a reload's restart warnings compare with it, not with the last
	// file loaded, so a change stays named until it is in effect.
	started *routes.Config
	// denyOnStoreError is the on_error of the store built at start; a
	// reload does not rebuild the store, so it does not change this.
	denyOnStoreError bool

	conns    conns // connections of the plain and TLS listeners
	inflight atomic.Int64
	// handled has a value once the last request in flight has left its
	// handler during the drain (see left).
	handled  chan struct{}
	draining atomic.Bool
	// redirectHTTP is tls.redirect_http of the last configuration with a
	// tls section: one that removes the section keeps the HTTPS listener
	// until a restart, and keeps the redirect with it.
	redirectHTTP atomic.Bool
}

// New loads the configuration at path and builds everything Serve needs,
// without listening yet. Access lines go to access, the destination of
// log's JSON handler, through a buffer that holds them for at most the
// config's log.flush_interval; nil sends them through log unbuffered.
func New(ctx context.Context, path string, log *slog.Logger, access io.Writer) (*Server, error) {
	cfg, err := routes.Load(path)
	if err != nil {
		return nil, err
	}
	return NewFromConfig(ctx, path, cfg, log, access)
}

// NewFromConfig is New with a configuration already loaded; path is where
// reloads read from ("" disables reload).
func NewFromConfig(ctx context.Context, path string, cfg *routes.Config, log *slog.Logger, access io.Writer) (*Server, error) {
	s := &Server{path: path, log: log, metrics: metrics.New(), clock: ratelimit.SystemClock(), addrs: make(map[string]net.Addr), handled: make(chan struct{}, 1)}
	var accessLog io.Writer
	if access != nil {
		s.access = linewriter.New(access, cfg.Log.FlushInterval, 0)
		accessLog = s.access
	}
	if err := s.buildStore(ctx, cfg); err != nil {
		return nil, err
	}
	if cfg.TLS != nil {
		m, err := certs.New(certsConfig(cfg), log)
		if err != nil {
			s.store.Close()
			return nil, fmt.Errorf("preparing tls: %w", err)
		}
		s.certs = m
	}
	s.gateway = proxy.New(proxy.Options{Logger: log, Metrics: s.metrics, Clock: s.clock, AccessLog: accessLog})
	s.memory.Retain(policyNames(cfg))
	s.gateway.Load(cfg, s.store)
	s.cfg.Store(cfg)
	s.started = cfg
	if cfg.TLS != nil {
		// Here rather than in Serve, which a reload may already race.
		s.redirectHTTP.Store(cfg.TLS.RedirectHTTP)
	}
	return s, nil
}

func (s *Server) buildStore(ctx context.Context, cfg *routes.Config) error {
	mo := ratelimit.MemoryOptions{MaxKeys: cfg.Store.Memory.MaxKeys, Clock: s.clock.Now}
	if cfg.Store.Type != "redis" {
		// The Redis store times its own round trips; its local fallback
		// is not timed, so store="redis" measures Redis alone.
		mo.Observe = s.metrics.Store("memory").Observe
	}
	s.memory = ratelimit.NewMemoryStore(mo)
	if cfg.Store.Type != "redis" {
		s.metrics.SetKeys(s.memory.Keys)
		s.store = s.memory
		return nil
	}
	rc := cfg.Store.Redis
	obs := s.metrics.Store("redis")
	r, err := redisstore.New(ctx, redisstore.Options{
		Mode:       rc.Mode,
		Addresses:  rc.Addresses,
		MasterName: rc.MasterName,
		Username:   rc.Username,
		Password:   rc.Password,
		DB:         rc.DB,
		KeyPrefix:  rc.KeyPrefix,
		Timeout:    rc.Timeout,
		OnError:    rc.OnError,
		Fallback:   s.memory,
		Observe:    obs.Observe,
		// Leased policies (sync: lease) report their round trips,
		// fallback and the instances seen alive.
		OnLease:         s.metrics.LeaseRequest,
		OnLeaseFallback: s.metrics.LeaseFallback,
		OnInstances:     s.metrics.LeaseInstances,
		Logger:          s.log,
	})
	if err != nil {
		s.memory.Close()
		return fmt.Errorf("connecting to redis: %w", err)
	}
	s.redis, s.store = r, r
	s.denyOnStoreError = rc.OnError == "deny"
	return nil
}

// certsConfig is the certificate manager's view of cfg's tls section. ACME
// challenges are answered by sluice's own listeners, so certmagic is told
// their ports rather than binding 80 and 443 itself.
func certsConfig(cfg *routes.Config) certs.Config {
	t := cfg.TLS
	c := certs.Config{MinVersion: t.MinVersion}
	for _, p := range t.Certificates {
		c.Certificates = append(c.Certificates, certs.Pair{CertFile: p.CertFile, KeyFile: p.KeyFile})
	}
	if a := t.ACME; a != nil {
		c.ACME = &certs.ACME{
			Domains: a.Domains, Email: a.Email, CA: a.CA, CARoot: a.CARoot, Storage: a.Storage, Challenges: a.Challenges,
			HTTPPort: portNumber(cfg.Listen), TLSPort: portNumber(t.Listen),
		}
	}
	return c
}

// Addr returns the bound address of a listener ("http", "https", "admin"),
// nil when it is not listening.
func (s *Server) Addr(name string) net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addrs[name]
}

// Serve listens and serves until ctx is done, then shuts down gracefully
// within the configured shutdown_timeout. It returns nil after a clean or
// timed-out shutdown, an error when a listener cannot start.
func (s *Server) Serve(ctx context.Context) error {
	defer s.closeAccessLog()
	cfg := s.cfg.Load()
	errc := make(chan error, 3)
	var handler http.Handler = s.counting(s.gateway)
	plain := handler
	if cfg.TLS != nil {
		// The TLS listener is bound first so redirects name its port.
		if err := s.listen("https", cfg.TLS.Listen, handler, s.certs.TLSConfig(), errc); err != nil {
			s.release()
			return err
		}
		// The gateway bounds the writes of its own answers; a redirect
		// needs the bound too, or a client that never reads them holds
		// the connection forever.
		redirect := s.sendBounded(certs.RedirectHTTPS(portOf(s.Addr("https").String())))
		plain = s.certs.HTTPChallenge(s.redirecting(handler, redirect))
	}
	if err := s.listen("http", cfg.Listen, plain, nil, errc); err != nil {
		s.closeAll()
		s.release()
		return err
	}
	if cfg.TLS != nil {
		if err := s.certs.Start(ctx); err != nil {
			s.log.Error("starting certificate management", "err", err)
		}
	}
	if cfg.Admin != "" {
		if err := s.listen("admin", cfg.Admin, s.sendBounded(admin.Handler(s.metrics, source{s})), nil, errc); err != nil {
			s.closeAll()
			s.release()
			return err
		}
	}
	s.log.Info("sluice started", "http", addrString(s.Addr("http")), "https", addrString(s.Addr("https")), "admin", addrString(s.Addr("admin")), "routes", len(cfg.Table.Routes), "store", cfg.Store.Type)
	select {
	case <-ctx.Done():
	case err := <-errc:
		s.closeAll()
		s.awaitHandlers()
		s.release()
		return err
	}
	return s.shutdown()
}

func (s *Server) listen(name, addr string, h http.Handler, tc *tls.Config, errc chan<- error) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening on %s (%s): %w", addr, name, err)
	}
	srv := s.httpServer(h, tc)
	s.mu.Lock()
	if name == "admin" {
		s.admin = srv
	} else {
		// The admin listener's connections are not tracked: it stays up
		// through the drain and closes last.
		ln = s.conns.listener(ln)
		s.servers = append(s.servers, srv)
	}
	s.addrs[name] = ln.Addr()
	s.mu.Unlock()
	go func() {
		var err error
		if tc != nil {
			err = srv.ServeTLS(ln, "", "")
		} else {
			err = srv.Serve(ln)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("serving %s on %s: %w", name, addr, err)
		}
	}()
	return nil
}

// maxHeaderBytes bounds a request's header fields, names and values, on
// every listener: 64 KiB, as Envoy's 60 KiB and nginx's 32 KiB bound
// them. Over HTTP/1 net/http reads 4 KiB past it before it answers 431
// (a head of 68 KiB passes). Over HTTP/2 it bounds the header list after
// HPACK decoding, which a client can make about 3,000 times larger than
// what it sends; 1 MiB let 72 KB on the wire become 246 MB of headers at
// the upstream.
const maxHeaderBytes = 64 << 10

// httpServer returns the http.Server of one listener.
func (s *Server) httpServer(h http.Handler, tc *tls.Config) *http.Server {
	srv := &http.Server{
		Handler:        h,
		MaxHeaderBytes: maxHeaderBytes,
		ErrorLog:       errorLog(s.log),
		TLSConfig:      tc,
		// A queued request checks its client through its connection.
		ConnContext: proxy.WithConn,
		HTTP2: &http.HTTP2Config{
			// nginx's http2_max_concurrent_streams; net/http's 250
			// let one connection hold 250 requests, each with its
			// goroutines and an upstream connection.
			MaxConcurrentStreams: 128,
		},
	}
	if cfg := s.cfg.Load(); cfg != nil {
		// The header timeout also bounds a TLS handshake, and runs from
		// the accept for a connection's first request, so a connection
		// opened and left silent is closed after it too.
		srv.ReadHeaderTimeout = cfg.ClientHeaderTimeout
		srv.IdleTimeout = cfg.KeepaliveTimeout
		srv.ConnState = connState(cfg.ClientHeaderTimeout)
		// A stream's write deadline only queues its reset behind the
		// connection's frame writer; an HTTP/2 client that stops
		// reading its socket blocks that writer, and with it every
		// stream. The connection goes once it has taken no byte for
		// send_timeout.
		srv.HTTP2.WriteByteTimeout = cfg.SendTimeout
	} else {
		srv.ConnState = connState(0)
	}
	return srv
}

// takeTurns yields the processor each time a keep-alive connection has
// finished a request (StateIdle, see connState), before it reads the next one, so that under load the
// connections are served in turn.
//
// Without it a connection whose next request has already arrived is
// served again at once: its goroutine hands the processor back and forth
// with the goroutine net/http runs beside each request, and a goroutine
// readied that way runs next and inherits the time slice, so one
// connection can keep a processor for the scheduler's whole 10 ms slice
// while the others wait. On 2 cores at saturation the p99 of a 429 was 13
// times its median (README › Performance).
func takeTurns() { runtime.Gosched() }

// redirecting serves the plain listener of a TLS configuration: redirect
// while tls.redirect_http is set, next otherwise, so a reload that
// changes redirect_http applies at once (one that removes tls takes
// effect at the restart, as the HTTPS listener does).
func (s *Server) redirecting(next, redirect http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.redirectHTTP.Load() {
			redirect.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// counting tracks requests in flight, to report what a timed-out shutdown
// cut off, and to wait for their handlers (awaitHandlers).
func (s *Server) counting(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.inflight.Add(1)
		defer s.left()
		next.ServeHTTP(w, r)
	})
}

// left counts a request out of its handler; the last one out during the
// drain wakes awaitHandlers.
func (s *Server) left() {
	if s.inflight.Add(-1) == 0 && s.draining.Load() {
		select {
		case s.handled <- struct{}{}:
		default:
		}
	}
}

// handlerGrace bounds how long the end of Serve waits for handlers still
// running once their connections are closed.
const handlerGrace = time.Second

// awaitHandlers waits, up to handlerGrace, until no request is in its
// handler. Closing a connection ends its request's context, not its
// handler, which still settles its count_status units (a round trip to
// Redis, up to store.redis.timeout) and writes its access line; net/http's
// Close does not wait for it, and the stores and the access log close
// next, and the process exits once Serve returns.
func (s *Server) awaitHandlers() {
	if s.inflight.Load() == 0 {
		return
	}
	s.draining.Store(true) // a listener's failure ends Serve without a drain
	t := time.NewTimer(handlerGrace)
	defer t.Stop()
	for s.inflight.Load() > 0 {
		select {
		case <-s.handled:
		case <-t.C:
			return
		}
	}
}

// shutdown stops accepting, lets in-flight and queued requests and
// upgraded connections finish within shutdown_timeout, then cuts off what
// is left. /readyz answers 503 from the start, and the admin listener
// closes last.
func (s *Server) shutdown() error {
	cfg := s.cfg.Load()
	deadline := time.Now().Add(cfg.ShutdownTimeout)
	s.draining.Store(true)
	s.log.Info("shutting down", "timeout", cfg.ShutdownTimeout.String(), "in_flight", s.inflight.Load())
	s.gateway.Drain(deadline)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	s.mu.Lock()
	servers := s.servers
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, srv := range servers {
		wg.Go(func() { srv.Shutdown(ctx) })
	}
	wg.Wait()
	// Shutdown is done with the connections it tracks; hijacked ones
	// (WebSockets) are still open until their ends close them.
	if !s.conns.wait(ctx) {
		inflight := s.inflight.Load()
		// Every connection still open is cut, and counted, here: the
		// servers' Close would otherwise close those it still tracks
		// first, and the count would hold the hijacked ones alone.
		cut := s.conns.closeAll()
		for _, srv := range servers {
			srv.Close()
		}
		s.log.Warn("shutdown timeout expired; cutting off requests", "timeout", cfg.ShutdownTimeout.String(), "cut_off", inflight, "connections", cut)
	}
	// A WebSocket's handler, too, outlives its connection: it writes its
	// line once the tunnel has closed.
	s.awaitHandlers()
	s.mu.Lock()
	adm := s.admin
	s.mu.Unlock()
	if adm != nil {
		// A probe or scrape already answering may finish; the drain is over.
		actx, acancel := context.WithTimeout(context.Background(), time.Second)
		adm.Shutdown(actx)
		acancel()
	}
	s.closeAll()
	s.release()
	s.closeAccessLog()
	s.log.Info("sluice stopped")
	return nil
}

// release stops what New started besides the listeners: certificate
// management and the stores. Serve calls it once, however it ends.
func (s *Server) release() {
	if s.certs != nil {
		s.certs.Stop()
	}
	s.store.Close()
	if s.redis != nil {
		s.memory.Close()
	}
}

// FlushAccessLog writes the access lines waiting in the buffer. Reload
// calls it.
func (s *Server) FlushAccessLog() {
	if s.access != nil {
		s.access.Flush()
	}
}

// closeAccessLog writes the access lines waiting in the buffer, and has
// those logged later written at once: the process exits when Serve
// returns, and a request cut off at the end (by shutdown_timeout or a
// failed listener) may log its line after that.
func (s *Server) closeAccessLog() {
	if s.access != nil {
		s.access.Close()
	}
}

// closeAll closes every listener and connection, the admin listener too.
func (s *Server) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, srv := range s.servers {
		srv.Close()
	}
	s.conns.closeAll()
	if s.admin != nil {
		s.admin.Close()
	}
}

// Reload re-reads the configuration file. An invalid file is logged and
// counted and the running configuration stays. Routes, policies, trusted
// proxies, logging and certificate files change in place; listener
// addresses and the store need a restart, which is logged.
func (s *Server) Reload() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	// A SIGHUP also hands log rotation a complete file.
	s.FlushAccessLog()
	if s.path == "" {
		return errors.New("reloading: no configuration file")
	}
	cfg, err := routes.Load(s.path)
	if err != nil {
		s.metrics.Reload(false)
		s.log.Error("reloading configuration; keeping the running one", "file", s.path, "err", err)
		return err
	}
	if s.certs != nil && cfg.TLS != nil {
		if err := s.certs.Reload(certsConfig(cfg)); err != nil {
			s.metrics.Reload(false)
			s.log.Error("reloading certificates; keeping the running configuration", "err", err)
			return err
		}
	}
	for _, w := range restartNeeded(s.started, cfg) {
		s.log.Warn("configuration change needs a restart to take effect", "field", w)
	}
	// The store learns the new names first: a table the new
	// configuration's first requests make is never taken for a retired
	// one.
	s.memory.Retain(policyNames(cfg))
	s.gateway.Load(cfg, s.store)
	s.cfg.Store(cfg)
	if cfg.TLS != nil {
		s.redirectHTTP.Store(cfg.TLS.RedirectHTTP)
	}
	if s.access != nil {
		s.access.SetDelay(cfg.Log.FlushInterval)
	}
	s.metrics.Reload(true)
	s.log.Info("configuration reloaded", "file", s.path, "routes", len(cfg.Table.Routes))
	return nil
}

// policyNames are the names of every policy cfg decides requests with:
// named and inline policies, and those of overrides, whose buckets the
// memory store keeps under names of their own.
func policyNames(cfg *routes.Config) []string {
	var names []string
	for name := range cfg.Policies {
		names = append(names, name)
	}
	for _, ov := range cfg.Overrides {
		for _, o := range ov.List() {
			if o.Policy != nil {
				names = append(names, o.Policy.Name)
			}
		}
	}
	return names
}

// restartNeeded names the fields in which cfg differs from old, the
// configuration that runs, that take effect only at a restart.
func restartNeeded(old, cfg *routes.Config) []string {
	var out []string
	if old.Listen != cfg.Listen {
		out = append(out, "listen")
	}
	if old.Admin != cfg.Admin {
		out = append(out, "admin")
	}
	if (old.TLS == nil) != (cfg.TLS == nil) {
		out = append(out, "tls")
	} else if old.TLS != nil {
		if old.TLS.Listen != cfg.TLS.Listen {
			out = append(out, "tls.listen")
		}
		if !reflect.DeepEqual(old.TLS.ACME, cfg.TLS.ACME) {
			out = append(out, "tls.acme")
		}
	}
	// store.memory.max_keys is every policy's default max_keys, which
	// the policies take as they load.
	oldStore, newStore := old.Store, cfg.Store
	oldStore.Memory.MaxKeys, newStore.Memory.MaxKeys = 0, 0
	if oldStore.Type != "redis" && newStore.Type != "redis" {
		// A memory store reads nothing of store.redis.
		oldStore.Redis, newStore.Redis = routes.Redis{}, routes.Redis{}
	}
	if !reflect.DeepEqual(oldStore, newStore) {
		out = append(out, "store")
	}
	if old.ClientHeaderTimeout != cfg.ClientHeaderTimeout {
		out = append(out, "client_header_timeout")
	}
	if old.KeepaliveTimeout != cfg.KeepaliveTimeout {
		out = append(out, "keepalive_timeout")
	}
	// Each write of an answer takes the new value at once; the bound on
	// a whole HTTP/2 connection is the listener's, set when it starts.
	if old.SendTimeout != cfg.SendTimeout {
		out = append(out, "send_timeout")
	}
	return out
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

func portNumber(addr string) int {
	n, _ := strconv.Atoi(portOf(addr))
	return n
}

func portOf(addr string) string {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "443"
	}
	return port
}

// source is what the admin listener sees of the server.
type source struct{ s *Server }

func (src source) Policy(name string) *ratelimit.Policy {
	if c := src.s.cfg.Load(); c != nil {
		return c.Policies[name]
	}
	return nil
}

func (src source) Override(name, key string) *ratelimit.Policy {
	if c := src.s.cfg.Load(); c != nil {
		if o := c.Overrides[name].ForKey(key); o != nil && !o.Exempt {
			return o.Policy
		}
	}
	return nil
}

func (src source) Overrides(name string) []*ratelimit.Policy {
	c := src.s.cfg.Load()
	if c == nil || c.Overrides[name] == nil {
		return nil
	}
	var out []*ratelimit.Policy
	for _, o := range c.Overrides[name].List() {
		if !o.Exempt && !slices.ContainsFunc(out, func(p *ratelimit.Policy) bool { return p.Name == o.Policy.Name }) {
			out = append(out, o.Policy)
		}
	}
	return out
}

func (src source) ClientKeyProblem(name, key string) string {
	if c := src.s.cfg.Load(); c != nil {
		return c.ClientKeyProblem(name, key)
	}
	return ""
}

func (src source) AdminToken() string {
	if c := src.s.cfg.Load(); c != nil {
		return c.AdminToken
	}
	return ""
}

func (src source) Store() ratelimit.Store { return src.s.store }

func (src source) Now() time.Time { return src.s.clock.Now() }

func (src source) Ready() admin.Readiness {
	r := admin.Readiness{Loaded: src.s.cfg.Load() != nil, StoreHealthy: true, Draining: src.s.draining.Load()}
	if src.s.redis != nil {
		r.StoreHealthy = src.s.redis.Healthy()
		r.DenyOnStoreError = src.s.denyOnStoreError
	}
	return r
}
