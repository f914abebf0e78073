package proxy

import (
	"encoding/hex"
	"math/rand/v2"
)

// maxRequestIDLen bounds a client-sent X-Request-Id; a longer or unprintable
// one is replaced, so logs and upstreams never carry arbitrary blobs.
const maxRequestIDLen = 128

// validRequestID reports whether a client-sent X-Request-Id may be kept.
func validRequestID(id string) bool {
	if id == "" || len(id) > maxRequestIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}

// newRequestID returns 128 random bits in hex. It needs no cryptographic
// strength: it names a request in logs, it guards nothing.
func newRequestID() string {
	var b [16]byte
	hi, lo := rand.Uint64(), rand.Uint64()
	for i := range 8 {
		b[i] = byte(hi >> (8 * i))
		b[8+i] = byte(lo >> (8 * i))
	}
	return hex.EncodeToString(b[:])
}
