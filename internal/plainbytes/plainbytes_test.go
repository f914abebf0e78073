package plainbytes

import (
	"strings"
	"testing"
)

// plain is what JSON and JSONHTML stand for, one byte at a time.
func plain(c byte, html bool) bool {
	if c < 0x20 || c >= 0x80 || c == '"' || c == '\\' {
		return false
	}
	return !html || c != '<' && c != '>' && c != '&'
}

// want is the longest run of whole 8-byte blocks of plain bytes.
func want(s string, html bool) int {
	n := 0
	for n+8 <= len(s) {
		for _, c := range []byte(s[n : n+8]) {
			if !plain(c, html) {
				return n
			}
		}
		n += 8
	}
	return n
}

// TestJSON puts every byte value at every place of strings of plain
// bytes of several lengths.
func TestJSON(t *testing.T) {
	t.Parallel()
	for _, fill := range []byte{'a', ' ', '~', '/', '0'} {
		for n := 0; n <= 25; n++ {
			base := strings.Repeat(string(fill), n)
			if got := JSON(base); got != n/8*8 {
				t.Fatalf("JSON(%q) = %d, want %d", base, got, n/8*8)
			}
			for at := 0; at < n; at++ {
				for c := 0; c < 256; c++ {
					b := []byte(base)
					b[at] = byte(c)
					s := string(b)
					if got, w := JSON(s), want(s, false); got != w {
						t.Fatalf("JSON(%q) = %d, want %d", s, got, w)
					}
					if got, w := JSONHTML(s), want(s, true); got != w {
						t.Fatalf("JSONHTML(%q) = %d, want %d", s, got, w)
					}
				}
			}
		}
	}
}
