package proxy

import "math/rand/v2"

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
	return requestID(rand.Uint64(), rand.Uint64())
}

// requestID writes hi and lo in hex, each lowest byte first: the bytes
// of hi, then those of lo, as hex.EncodeToString would write them.
func requestID(hi, lo uint64) string {
	var b [32]byte
	for i := range 8 {
		h, l := 2*int(byte(hi>>(8*i))), 2*int(byte(lo>>(8*i)))
		b[2*i], b[2*i+1] = hexPairs[h], hexPairs[h+1]
		b[16+2*i], b[17+2*i] = hexPairs[l], hexPairs[l+1]
	}
	return string(b[:])
}

// hexPairs holds the two hex digits of every byte, "00" to "ff".
var hexPairs = func() (t [512]byte) {
	for n := range 256 {
		t[2*n], t[2*n+1] = hexDigits[n>>4], hexDigits[n&0xf]
	}
	return t
}()
