// Package certs terminates TLS for the gateway: static PEM certificates
// chosen by SNI, and certificates obtained and renewed automatically over
// ACME with certmagic.
//
// A Manager is built from a Config with New, which reads the static files
// and prepares ACME without contacting the CA. The HTTPS listener serves
// with TLSConfig; the plain listener's handler is wrapped in HTTPChallenge
// so that ACME HTTP-01 challenges are answered there. Start begins
// obtaining certificates in the background once the listeners are bound;
// Reload re-reads the static files on SIGHUP; Stop ends the background work.
package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/mholt/acmez/v3"

	"github.com/sluicehq/sluice/internal/certpair"
	"github.com/sluicehq/sluice/internal/tlsversion"
)

// The ACME challenge types a Config may enable.
const (
	ChallengeHTTP01    = "http-01"
	ChallengeTLSALPN01 = "tls-alpn-01"
)

// Config says where certificates come from. At least one of Certificates
// and ACME must be set.
type Config struct {
	// MinVersion is the lowest TLS version accepted, such as
	// tls.VersionTLS12 (the default when 0).
	MinVersion uint16
	// Certificates are static PEM pairs. A handshake gets the pair whose
	// certificate names the requested server name (SNI), exactly or by a
	// wildcard; when none does (or the client sent no SNI), a name managed
	// by ACME is tried, and then the first pair is served.
	Certificates []Pair
	// ACME, when set, obtains and renews certificates for its Domains.
	ACME *ACME
}

// ACME configures automatic certificates. Configuring it means agreeing to
// the CA's terms of service.
type ACME struct {
	// Domains are the names to obtain certificates for; one certificate
	// per name. They must resolve to this gateway for validation.
	Domains []string
	// Email is the ACME account's contact address; optional.
	Email string
	// CA is the ACME directory URL. Default: Let's Encrypt production.
	CA string
	// CARoot is a PEM file of root certificates to trust for the CA's own
	// HTTPS, for a private or test CA such as pebble. Default: the system
	// roots.
	CARoot string
	// Storage is the directory where certificates, keys and the ACME
	// account are kept; instances sharing it share certificates. Default:
	// certmagic's data directory ($HOME/.local/share/certmagic).
	Storage string
	// Challenges lists the challenge types to solve, ChallengeHTTP01 and
	// ChallengeTLSALPN01. Default: both.
	Challenges []string
	// HTTPPort is the port of the plain listener that serves HTTPChallenge,
	// and TLSPort the port of the listener that serves TLSConfig. The CA
	// connects to 80 and 443; set these when the listeners use other ports
	// behind a forward so that certmagic leaves the challenges to them
	// instead of binding 80 and 443 itself. 0 means 80 and 443.
	HTTPPort, TLSPort int
}

// Manager serves certificates for TLS handshakes. Build it with New; it is
// safe for concurrent use.
type Manager struct {
	logger *slog.Logger

	// conf is the tls.Config every handshake uses, replaced whole by Reload.
	conf   atomic.Pointer[tls.Config]
	static atomic.Pointer[staticSet]
	reload sync.Mutex // serializes Reload

	acme   *ACME // a copy of the configuration, nil without ACME
	alpn   bool  // tls-alpn-01 is enabled
	magic  *certmagic.Config
	issuer *certmagic.ACMEIssuer
	cache  *certmagic.Cache

	mu      sync.Mutex
	started bool
	stopped bool
	cancel  context.CancelFunc
}

// errNoCertificate is returned to a handshake nothing can serve.
var errNoCertificate = errors.New("no certificate available")

// New loads the static certificates and prepares certmagic; it does not
// contact the CA. A nil logger means slog.Default(). Call Stop when done.
func New(cfg Config, logger *slog.Logger) (*Manager, error) {
	if logger == nil {
		logger = slog.Default()
	}
	if cfg.ACME == nil && len(cfg.Certificates) == 0 {
		return nil, errors.New("configuring tls: no certificates and no acme")
	}
	m := &Manager{logger: logger}
	var errs []error
	if err := checkVersion(cfg.MinVersion); err != nil {
		errs = append(errs, err)
	}
	static, err := loadStatic(cfg.Certificates)
	if err != nil {
		errs = append(errs, err)
	}
	if cfg.ACME != nil {
		if err := m.prepareACME(*cfg.ACME); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		if m.cache != nil {
			m.cache.Stop()
		}
		return nil, errors.Join(errs...)
	}
	m.warnExpired(static, cfg.Certificates)
	m.static.Store(static)
	m.conf.Store(m.buildConfig(cfg.MinVersion))
	return m, nil
}

func checkVersion(v uint16) error {
	if v == 0 || tlsversion.Known(v) {
		return nil
	}
	return fmt.Errorf("configuring tls: unknown minimum version 0x%04x", v)
}

// prepareACME builds the certmagic cache, config and issuer for a.
func (m *Manager) prepareACME(a ACME) error {
	a.Domains = slices.Clone(a.Domains)
	a.Challenges = slices.Clone(a.Challenges)
	var errs []error
	if len(a.Domains) == 0 {
		errs = append(errs, errors.New("configuring acme: no domains"))
	}
	for _, d := range a.Domains {
		switch {
		case d == "":
			errs = append(errs, errors.New("configuring acme: empty domain"))
		case strings.Contains(d, "*"):
			// Wildcards need dns-01, which needs a DNS provider's API.
			errs = append(errs, fmt.Errorf("configuring acme: wildcard domain %q needs the dns-01 challenge, which is not supported; use a static certificate", d))
		}
	}
	httpOn, alpnOn := len(a.Challenges) == 0, len(a.Challenges) == 0
	for _, c := range a.Challenges {
		switch c {
		case ChallengeHTTP01:
			httpOn = true
		case ChallengeTLSALPN01:
			alpnOn = true
		default:
			errs = append(errs, fmt.Errorf("configuring acme: unknown challenge %q (want %s or %s)", c, ChallengeHTTP01, ChallengeTLSALPN01))
		}
	}
	if a.CA != "" {
		if u, err := url.Parse(a.CA); err != nil || u.Scheme != "https" || u.Host == "" {
			errs = append(errs, fmt.Errorf("configuring acme: ca %q: want an https:// directory URL", a.CA))
		}
	}
	var roots *x509.CertPool
	if a.CARoot != "" {
		pemData, err := os.ReadFile(a.CARoot)
		if err != nil {
			errs = append(errs, fmt.Errorf("loading acme ca root %s: %w", a.CARoot, err))
		} else {
			roots = x509.NewCertPool()
			if !roots.AppendCertsFromPEM(pemData) {
				errs = append(errs, fmt.Errorf("loading acme ca root %s: no PEM certificate found", a.CARoot))
			}
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}

	zl := newZapLogger(m.logger.With("component", "certmagic").Handler())
	var magic *certmagic.Config
	m.cache = certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert: func(certmagic.Certificate) (*certmagic.Config, error) { return magic, nil },
		Logger:           zl,
	})
	tmpl := certmagic.Config{
		Logger:         zl,
		OnEvent:        m.onEvent,
		ShouldEmitFunc: func(event string) bool { return event != "tls_get_certificate" },
	}
	if a.Storage != "" {
		tmpl.Storage = &certmagic.FileStorage{Path: a.Storage}
	}
	// A client without SNI gets the first domain's certificate when no
	// static pair is loaded, at start or after a reload that removed
	// them (getCertificate asks certmagic only then).
	tmpl.DefaultServerName = a.Domains[0]
	magic = certmagic.New(m.cache, tmpl)
	m.issuer = certmagic.NewACMEIssuer(magic, certmagic.ACMEIssuer{
		CA:                      a.CA,
		Email:                   a.Email,
		Agreed:                  true,
		TrustedRoots:            roots,
		DisableHTTPChallenge:    !httpOn,
		DisableTLSALPNChallenge: !alpnOn,
		AltHTTPPort:             a.HTTPPort,
		AltTLSALPNPort:          a.TLSPort,
		Logger:                  zl,
	})
	magic.Issuers = []certmagic.Issuer{m.issuer}
	m.magic = magic
	m.acme = &a
	m.alpn = alpnOn
	return nil
}

// onEvent turns certmagic's events into the few log lines an operator
// needs: which certificate is served, obtained, or failing.
func (m *Manager) onEvent(_ context.Context, event string, data map[string]any) error {
	switch event {
	case "cert_obtaining":
		m.logger.Info("obtaining tls certificate", "identifier", data["identifier"])
	case "cert_obtained":
		m.logger.Info("obtained tls certificate", "identifier", data["identifier"], "renewal", data["renewal"], "issuer", data["issuer"])
	case "cert_failed":
		m.logger.Error("obtaining tls certificate failed; retrying with backoff", "identifier", data["identifier"], "renewal", data["renewal"], "error", data["error"])
	case "cached_managed_cert":
		m.logger.Info("serving managed tls certificate", "names", data["sans"])
	}
	return nil
}

// buildConfig returns the handshake config for minVersion.
func (m *Manager) buildConfig(minVersion uint16) *tls.Config {
	if minVersion == 0 {
		minVersion = tls.VersionTLS12
	}
	protos := []string{"h2", "http/1.1"}
	if m.alpn {
		protos = append(protos, acmez.ACMETLS1Protocol)
	}
	return &tls.Config{
		MinVersion:     minVersion,
		CipherSuites:   cipherSuites(minVersion),
		NextProtos:     protos,
		GetCertificate: m.getCertificate,
	}
}

// modernSuites are the TLS 1.2 cipher suites served: forward secret
// (ECDHE) and authenticated encryption (AES-GCM, ChaCha20-Poly1305) only,
// as Mozilla's "intermediate" profile. Go's defaults also offer the CBC
// suites with SHA-1 MACs, which TLS 1.2 clients do not need. TLS 1.3
// suites are not configurable and are all modern.
var modernSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// legacySuites are the only suites TLS 1.0 and 1.1 can use; they are added
// (after the modern ones, so a TLS 1.2 client never picks them over those)
// only when min_version lets such clients in.
var legacySuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA,
	tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA,
	tls.TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA,
}

func cipherSuites(minVersion uint16) []uint16 {
	if minVersion < tls.VersionTLS12 {
		return slices.Concat(modernSuites, legacySuites)
	}
	return modernSuites
}

// TLSConfig returns the config for the HTTPS listener: ALPN h2 (to
// clients that can use it) and http/1.1 (and acme-tls/1 when tls-alpn-01
// is on), the minimum version,
// and certificates chosen per handshake (static by SNI, then ACME-managed,
// then the first static pair). Each handshake uses the config current at
// that moment, so a Reload applies to new connections at once.
func (m *Manager) TLSConfig() *tls.Config {
	c := m.conf.Load().Clone()
	c.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		conf := m.conf.Load()
		if conf.MinVersion < tls.VersionTLS12 && !http2Capable(hello) {
			// HTTP/2 needs TLS 1.2 and an AEAD suite (RFC 9113 §9.2),
			// and Go's HTTP/2 server closes a connection without them
			// instead of answering: such a client, which min_version
			// lets in, must not be offered h2.
			conf = conf.Clone()
			// Clone shares the slice, which other handshakes read.
			conf.NextProtos = slices.DeleteFunc(slices.Clone(conf.NextProtos), func(p string) bool { return p == "h2" })
		}
		return conf, nil
	}
	return c
}

// http2Capable reports whether the connection hello starts will have what
// HTTP/2 needs: TLS 1.3, or TLS 1.2 with one of modernSuites (the
// server's order puts them before the legacy ones).
func http2Capable(hello *tls.ClientHelloInfo) bool {
	if slices.Contains(hello.SupportedVersions, tls.VersionTLS13) {
		return true
	}
	return slices.Contains(hello.SupportedVersions, tls.VersionTLS12) &&
		slices.ContainsFunc(hello.CipherSuites, func(s uint16) bool { return slices.Contains(modernSuites, s) })
}

func (m *Manager) getCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if m.magic != nil && m.alpn && isACMEChallenge(hello) {
		return m.magic.GetCertificate(hello)
	}
	static := m.static.Load()
	if c := static.match(hello.ServerName); c != nil {
		return c, nil
	}
	if m.magic != nil && (static.first() == nil || coveredBy(hello.ServerName, m.acme.Domains)) {
		c, err := m.magic.GetCertificate(hello)
		if err == nil {
			return c, nil
		}
		if static.first() == nil {
			return nil, err
		}
	}
	if c := static.first(); c != nil {
		return c, nil
	}
	return nil, errNoCertificate
}

// isACMEChallenge reports a TLS-ALPN-01 validation handshake (RFC 8737):
// the single protocol acme-tls/1 and the name being validated.
func isACMEChallenge(hello *tls.ClientHelloInfo) bool {
	return hello.ServerName != "" && len(hello.SupportedProtos) == 1 && hello.SupportedProtos[0] == acmez.ACMETLS1Protocol
}

// HTTPChallenge wraps the plain listener's handler: it answers ACME
// HTTP-01 challenges and passes everything else to next. Without ACME it
// returns next.
func (m *Manager) HTTPChallenge(next http.Handler) http.Handler {
	if m.issuer == nil {
		return next
	}
	return m.issuer.HTTPChallengeHandler(next)
}

// Start begins obtaining and renewing the ACME certificates in the
// background and returns at once; certificates already in Storage are
// loaded and served without a new order. A CA that cannot be reached is
// logged and retried with backoff (for up to 30 days, at most 6 hours
// apart) while the listeners keep serving. Call Start after the listeners
// are bound, so that the challenges reach them. Start does nothing
// without ACME; ctx ending stops the background work, as Stop does.
func (m *Manager) Start(ctx context.Context) error {
	if m.magic == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return errors.New("starting acme: manager is stopped")
	}
	if m.started {
		return errors.New("starting acme: already started")
	}
	ctx, m.cancel = context.WithCancel(ctx)
	m.started = true
	m.logger.Info("managing tls certificates with acme", "domains", m.acme.Domains, "ca", m.issuer.CA)
	if err := m.magic.ManageAsync(ctx, m.acme.Domains); err != nil {
		return fmt.Errorf("starting acme for %v: %w", m.acme.Domains, err)
	}
	return nil
}

// Reload re-reads the static certificate files and applies cfg's
// MinVersion to new handshakes. On error the old certificates stay and
// nothing changes. ACME settings are read only by New; a change to them is
// logged and takes effect at restart.
func (m *Manager) Reload(cfg Config) error {
	m.reload.Lock()
	defer m.reload.Unlock()
	if err := checkVersion(cfg.MinVersion); err != nil {
		return err
	}
	if m.magic == nil && len(cfg.Certificates) == 0 {
		return errors.New("reloading tls: no certificates")
	}
	static, err := loadStatic(cfg.Certificates)
	if err != nil {
		return fmt.Errorf("reloading tls: %w", err)
	}
	m.warnExpired(static, cfg.Certificates)
	m.static.Store(static)
	m.conf.Store(m.buildConfig(cfg.MinVersion))
	return nil
}

// warnExpired logs each static certificate that is not valid now: every
// client would refuse it, and nothing else would say why. It is served
// all the same, as nginx serves one, since refusing the file would leave
// a first start with nothing to serve.
func (m *Manager) warnExpired(s *staticSet, pairs []Pair) {
	now := time.Now()
	for i, c := range s.certs {
		if why := certpair.Expired(*c, now); why != "" {
			m.logger.Warn("certificate is not valid now: clients will refuse it", "cert_file", pairs[i].CertFile, "why", why)
		}
	}
}

// Stop ends certificate maintenance and any obtain in progress. It is safe
// to call more than once. Handshakes keep being served from memory.
func (m *Manager) Stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return
	}
	m.stopped = true
	if m.cancel != nil {
		m.cancel()
	}
	if m.cache != nil {
		m.cache.Stop()
	}
}
