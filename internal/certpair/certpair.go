// Package certpair checks a certificate and its key as sluice loads them,
// naming the file at fault, so that validation and the certificate
// manager report a broken pair alike.
package certpair

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"
	"time"
)

// Error is a certificate pair that does not load, and the file at fault.
type Error struct {
	File string // the file at fault
	Key  bool   // File is the key, not the certificate
	For  string // for a key that does not match: the certificate's file
	Err  error
}

func (e *Error) Error() string {
	if e.For != "" {
		return fmt.Sprintf("loading key %s for certificate %s: %v", e.File, e.For, e.Err)
	}
	if e.Key {
		return fmt.Sprintf("loading key %s: %v", e.File, e.Err)
	}
	return fmt.Sprintf("loading certificate %s: %v", e.File, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Parse checks the PEM contents certPEM and keyPEM of the files certFile
// and keyFile and returns the loaded pair, or an *Error naming the file
// at fault.
func Parse(certFile, keyFile string, certPEM, keyPEM []byte) (tls.Certificate, error) {
	certErr := func(err error) error { return &Error{File: certFile, Err: err} }
	keyErr := func(err error) error { return &Error{File: keyFile, Key: true, Err: err} }
	if err := checkPEM(certPEM, "CERTIFICATE"); err != nil {
		return tls.Certificate{}, certErr(err)
	}
	if err := checkPEM(keyPEM, "PRIVATE KEY"); err != nil {
		return tls.Certificate{}, keyErr(err)
	}
	if err := checkBlocks(certPEM); err != nil {
		return tls.Certificate{}, certErr(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		// Both files are PEM of the right kind, so what is left is a
		// broken certificate, a chain whose leaf is not first, or a key
		// that belongs to another certificate.
		if n := keyMatchesLater(certPEM, keyPEM); n > 0 {
			return tls.Certificate{}, certErr(fmt.Errorf("the key belongs to certificate %d of the chain: the leaf must come first", n+1))
		}
		return tls.Certificate{}, &Error{File: keyFile, Key: true, For: certFile, Err: err}
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return tls.Certificate{}, certErr(err)
		}
	}
	// The intermediates go out as they are: one that does not parse
	// would make every client refuse the chain.
	for i, der := range cert.Certificate[1:] {
		if _, err := x509.ParseCertificate(der); err != nil {
			return tls.Certificate{}, certErr(fmt.Errorf("certificate %d of the chain: %w", i+2, err))
		}
	}
	return cert, nil
}

// checkBlocks reports a PEM block of data that does not decode. A PEM
// reader skips such a block and goes on with the next, so an
// intermediate with broken base64 would leave the chain without a word.
func checkBlocks(data []byte) error {
	const begin = "-----BEGIN "
	for n := 1; ; n++ {
		i := bytes.Index(data, []byte(begin))
		if i < 0 {
			return nil
		}
		data = data[i:]
		end := bytes.Index(data[len(begin):], []byte(begin))
		if end < 0 {
			end = len(data)
		} else {
			end += len(begin)
		}
		if block, _ := pem.Decode(data[:end]); block == nil {
			return fmt.Errorf("block %d is not valid PEM", n)
		}
		data = data[end:]
	}
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
