package certs

import (
	"crypto/tls"
	"errors"
	"os"
	"strings"

	"github.com/sluicehq/sluice/internal/certpair"
)

// Pair names one static certificate: a PEM certificate chain (leaf first)
// and its PEM private key.
type Pair struct {
	CertFile string
	KeyFile  string
}

// LoadPair reads and checks p. The error, a *certpair.Error, names the
// file at fault: "loading certificate certs/api.pem: ..." or "loading key
// certs/api-key.pem: ...".
func LoadPair(p Pair) (tls.Certificate, error) {
	certPEM, err := os.ReadFile(p.CertFile)
	if err != nil {
		return tls.Certificate{}, &certpair.Error{File: p.CertFile, Err: err}
	}
	keyPEM, err := os.ReadFile(p.KeyFile)
	if err != nil {
		return tls.Certificate{}, &certpair.Error{File: p.KeyFile, Key: true, Err: err}
	}
	return certpair.Parse(p.CertFile, p.KeyFile, certPEM, keyPEM)
}

// staticSet is an immutable set of loaded pairs indexed by the DNS names
// their leaves cover.
type staticSet struct {
	certs    []*tls.Certificate
	exact    map[string]*tls.Certificate // "api.example.com"
	wildcard map[string]*tls.Certificate // "example.com" for "*.example.com"
}

// loadStatic loads every pair; it reports every broken pair, not just the first.
func loadStatic(pairs []Pair) (*staticSet, error) {
	s := &staticSet{exact: map[string]*tls.Certificate{}, wildcard: map[string]*tls.Certificate{}}
	var errs []error
	for _, p := range pairs {
		cert, err := LoadPair(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		c := &cert
		s.certs = append(s.certs, c)
		// The first pair naming a host wins, as the first matching route does.
		for _, name := range c.Leaf.DNSNames {
			name = normalize(name)
			if parent, ok := strings.CutPrefix(name, "*."); ok {
				if _, dup := s.wildcard[parent]; !dup {
					s.wildcard[parent] = c
				}
				continue
			}
			if _, dup := s.exact[name]; !dup {
				s.exact[name] = c
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return s, nil
}

// match returns the pair for serverName: an exact name first, then a
// wildcard covering exactly one more label. It returns nil when none does.
func (s *staticSet) match(serverName string) *tls.Certificate {
	name := normalize(serverName)
	if name == "" {
		return nil
	}
	if c := s.exact[name]; c != nil {
		return c
	}
	if _, parent, ok := strings.Cut(name, "."); ok && parent != "" {
		return s.wildcard[parent]
	}
	return nil
}

// first returns the pair served when no name matches, or nil.
func (s *staticSet) first() *tls.Certificate {
	if len(s.certs) == 0 {
		return nil
	}
	return s.certs[0]
}

func normalize(name string) string {
	return strings.ToLower(strings.TrimSuffix(name, "."))
}

// coveredBy reports whether name is one of names or covered by a wildcard
// among them.
func coveredBy(name string, names []string) bool {
	name = normalize(name)
	if name == "" {
		return false
	}
	_, parent, _ := strings.Cut(name, ".")
	for _, n := range names {
		n = normalize(n)
		if n == name {
			return true
		}
		if p, ok := strings.CutPrefix(n, "*."); ok && p == parent {
			return true
		}
	}
	return false
}
