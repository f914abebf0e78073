package certs

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// Pair names one static certificate: a PEM certificate chain (leaf first)
// and its PEM private key.
type Pair struct {
	CertFile string
	KeyFile  string
}

// LoadPair reads and checks p. The error, a *PairError, names the file at
// fault: "loading certificate certs/api.pem: ..." or "loading key
// certs/api-key.pem: ...".
func LoadPair(p Pair) (tls.Certificate, error) {
	certPEM, err := os.ReadFile(p.CertFile)
	if err != nil {
		return tls.Certificate{}, &PairError{File: p.CertFile, Err: err}
	}
	keyPEM, err := os.ReadFile(p.KeyFile)
	if err != nil {
		return tls.Certificate{}, &PairError{File: p.KeyFile, Key: true, Err: err}
	}
	return ParsePair(p, certPEM, keyPEM)
}

// PairError is a certificate pair that does not load, and the file at
// fault.
type PairError struct {
	File string // the file at fault
	Key  bool   // File is the key, not the certificate
	For  string // for a key that does not match: the certificate's file
	Err  error
}

func (e *PairError) Error() string {
	if e.For != "" {
		return fmt.Sprintf("loading key %s for certificate %s: %v", e.File, e.For, e.Err)
	}
	if e.Key {
		return fmt.Sprintf("loading key %s: %v", e.File, e.Err)
	}
	return fmt.Sprintf("loading certificate %s: %v", e.File, e.Err)
}

func (e *PairError) Unwrap() error { return e.Err }

// ParsePair checks the PEM contents of p's files and returns the loaded
// pair, or a *PairError naming the file at fault.
func ParsePair(p Pair, certPEM, keyPEM []byte) (tls.Certificate, error) {
	certErr := func(err error) error { return &PairError{File: p.CertFile, Err: err} }
	keyErr := func(err error) error { return &PairError{File: p.KeyFile, Key: true, Err: err} }
	if err := checkPEM(certPEM, "CERTIFICATE"); err != nil {
		return tls.Certificate{}, certErr(err)
	}
	if err := checkPEM(keyPEM, "PRIVATE KEY"); err != nil {
		return tls.Certificate{}, keyErr(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		// Both files are PEM of the right kind, so what is left is a
		// broken certificate, a chain whose leaf is not first, or a key
		// that belongs to another certificate.
		if n := keyMatchesLater(certPEM, keyPEM); n > 0 {
			return tls.Certificate{}, certErr(fmt.Errorf("the key belongs to certificate %d of the chain: the leaf must come first", n+1))
		}
		return tls.Certificate{}, &PairError{File: p.KeyFile, Key: true, For: p.CertFile, Err: err}
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return tls.Certificate{}, certErr(err)
		}
	}
	return cert, nil
}

// keyMatchesLater returns the index of the first certificate after the
// first in certPEM whose public key keyPEM's key matches, or 0 for none.
func keyMatchesLater(certPEM, keyPEM []byte) int {
	for i, rest := 0, certPEM; ; i++ {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			return 0
		}
		if i == 0 || !strings.HasSuffix(block.Type, "CERTIFICATE") {
			continue
		}
		single := pem.EncodeToMemory(block)
		if _, err := tls.X509KeyPair(single, keyPEM); err == nil {
			return i
		}
	}
}

// Expired names, for a loaded pair whose leaf is not valid at now, when
// it was or will be; "" for one that is.
func Expired(cert tls.Certificate, now time.Time) string {
	switch l := cert.Leaf; {
	case l == nil:
		return ""
	case now.After(l.NotAfter):
		return "expired " + l.NotAfter.UTC().Format(time.RFC3339)
	case now.Before(l.NotBefore):
		return "not valid before " + l.NotBefore.UTC().Format(time.RFC3339)
	}
	return ""
}

// checkPEM reports whether data holds a PEM block whose type ends in kind
// ("CERTIFICATE", or "PRIVATE KEY" for PKCS #8, RSA and EC keys), so that
// a swapped or garbled file is blamed by name.
func checkPEM(data []byte, kind string) error {
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return fmt.Errorf("no PEM %s block found", strings.ToLower(kind))
		}
		if strings.HasSuffix(block.Type, kind) {
			return nil
		}
	}
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
