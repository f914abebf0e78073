package routes

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/certpair"
	"github.com/sluicehq/sluice/internal/tlsversion"
)

func (d *decoder) tls(n *yaml.Node, path, dir string) *TLS {
	m := d.fields(n, path, "listen", "redirect_http", "min_version", "certificates", "acme")
	if deref(n).Kind != yaml.MappingNode {
		return &TLS{}
	}
	d.tlsListen = d.address(d.str(m, "listen", path), field(path, "listen"))
	t := &TLS{
		Listen:       d.tlsListen.or(":8443"),
		RedirectHTTP: d.boolean(m, "redirect_http", path).or(false),
		MinVersion:   tls.VersionTLS12,
	}
	if v := d.str(m, "min_version", path); v.set {
		if mv, ok := tlsversion.Parse(v.v); ok {
			t.MinVersion = mv
		} else {
			d.errorf(v.n, field(path, "min_version"), "unknown TLS version %q (want %s)", v.v, tlsversion.Names)
		}
	}
	cp := field(path, "certificates")
	certs := d.items(m["certificates"].val, cp)
	for i, c := range certs {
		if pair, ok := d.certPair(c, index(cp, i), dir); ok {
			t.Certificates = append(t.Certificates, pair)
		}
	}
	if e := m["acme"]; !isNull(e.val) {
		t.ACME = d.acme(e.val, field(path, "acme"), dir)
	}
	if len(certs) == 0 && isNull(m["acme"].val) {
		d.errorf(n, path, "needs certificates or acme")
	}
	return t
}

// certPair checks that the pair loads, naming the file at fault.
func (d *decoder) certPair(n *yaml.Node, path, dir string) (CertPair, bool) {
	m := d.fields(n, path, "cert_file", "key_file")
	cert, key := d.str(m, "cert_file", path), d.str(m, "key_file", path)
	ok := true
	for _, f := range []struct {
		v    val[string]
		name string
	}{{cert, "cert_file"}, {key, "key_file"}} {
		if !f.v.set || f.v.v == "" {
			d.errorf(n, field(path, f.name), "required")
			ok = false
		}
	}
	if !ok {
		return CertPair{}, false
	}
	pair := CertPair{CertFile: resolvePath(dir, cert.v), KeyFile: resolvePath(dir, key.v)}
	certPEM, err := os.ReadFile(pair.CertFile)
	if err != nil {
		d.errorf(cert.n, field(path, "cert_file"), "loading certificate %s: %v", cert.v, err)
		ok = false
	}
	keyPEM, err := os.ReadFile(pair.KeyFile)
	if err != nil {
		d.errorf(key.n, field(path, "key_file"), "loading key %s: %v", key.v, err)
		ok = false
	}
	if !ok {
		return CertPair{}, false
	}
	// As the gateway loads it, with the file at fault named as written.
	if _, err := certpair.Parse(cert.v, key.v, certPEM, keyPEM); err != nil {
		at, name := cert.n, "cert_file"
		var pe *certpair.Error
		if errors.As(err, &pe) && pe.Key {
			at, name = key.n, "key_file"
		}
		d.errorf(at, field(path, name), "%v", err)
		return CertPair{}, false
	}
	return pair, true
}

func (d *decoder) acme(n *yaml.Node, path, dir string) *ACME {
	m := d.fields(n, path, "domains", "email", "ca", "ca_root", "storage", "challenges")
	if deref(n).Kind != yaml.MappingNode {
		return &ACME{}
	}
	email := d.str(m, "email", path)
	a := &ACME{
		Email:      email.v,
		CA:         LetsEncrypt,
		Storage:    resolvePath(dir, d.str(m, "storage", path).or("data/certs")),
		Challenges: []string{"http-01", "tls-alpn-01"},
	}
	domains := d.strs(m, "domains", path)
	for i, s := range domains.v {
		if !s.set {
			continue
		}
		if err := checkDomain(s.v); err != nil {
			d.errorf(s.n, index(field(path, "domains"), i), "%v", err)
			continue
		}
		a.Domains = append(a.Domains, strings.ToLower(s.v))
	}
	if len(domains.v) == 0 {
		d.errorf(orNode(domains.n, n), field(path, "domains"), "must list at least one domain")
	}
	if email.v != "" && !strings.Contains(email.v, "@") {
		d.errorf(email.n, field(path, "email"), "invalid email address %q", email.v)
	}
	if v := d.str(m, "ca", path); v.set {
		u, err := url.Parse(v.v)
		if err != nil || u.Scheme != "https" || u.Host == "" {
			d.errorf(v.n, field(path, "ca"), "invalid ACME directory URL %q: want https://host/path", v.v)
		} else {
			a.CA = v.v
		}
	}
	if v := d.str(m, "ca_root", path); v.set && v.v != "" {
		a.CARoot = resolvePath(dir, v.v)
		pem, err := os.ReadFile(a.CARoot)
		if err != nil {
			d.errorf(v.n, field(path, "ca_root"), "loading CA root %s: %v", v.v, err)
		} else if !x509.NewCertPool().AppendCertsFromPEM(pem) {
			d.errorf(v.n, field(path, "ca_root"), "loading CA root %s: no PEM certificate found", v.v)
		}
	}
	if ch := d.strs(m, "challenges", path); ch.set {
		a.Challenges = nil
		for i, s := range ch.v {
			if !s.set {
				continue
			}
			switch {
			case s.v != "http-01" && s.v != "tls-alpn-01":
				d.errorf(s.n, index(field(path, "challenges"), i), "unknown challenge %q (want http-01 or tls-alpn-01)", s.v)
			case contains(a.Challenges, s.v):
				d.errorf(s.n, index(field(path, "challenges"), i), "challenge %q is listed twice", s.v)
			default:
				a.Challenges = append(a.Challenges, s.v)
			}
		}
		if len(ch.v) == 0 {
			d.errorf(orNode(ch.n, n), field(path, "challenges"), "must list at least one challenge")
		}
	}
	return a
}

// checkDomain accepts a DNS name. Wildcards need the DNS-01 challenge,
// which sluice does not offer.
func checkDomain(s string) error {
	if strings.HasPrefix(s, "*.") {
		return fmt.Errorf("wildcard domain %q needs the dns-01 challenge, which is not supported", s)
	}
	if !validHostname(s) {
		return fmt.Errorf("invalid domain %q", s)
	}
	return nil
}

// validHostname accepts dot-separated labels of letters, digits and
// hyphens, not starting or ending with a hyphen.
func validHostname(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

func orNode(n, fallback *yaml.Node) *yaml.Node {
	if n != nil {
		return n
	}
	return fallback
}
