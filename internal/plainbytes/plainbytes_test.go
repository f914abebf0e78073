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

// fieldByte is what FieldValue stands for: no control character.
func fieldByte(c byte) bool { return c >= 0x20 && c != 0x7f }

func jsonByte(c byte) bool { return plain(c, false) }
func htmlByte(c byte) bool { return plain(c, true) }

// want is the longest run of whole 8-byte blocks of bytes for which ok
// holds, or all of s when those reach its last eight bytes.
func want(s string, ok func(byte) bool) int {
	n := 0
	for n+8 <= len(s) {
		for _, c := range []byte(s[n : n+8]) {
			if !ok(c) {
				return n
			}
		}
		n += 8
	}
	if len(s) < 8 {
		return n
	}
	for _, c := range []byte(s[len(s)-8:]) {
		if !ok(c) {
			return n
		}
	}
	return len(s)
}

// TestPrefixes puts every byte value at every place of strings of one
// byte repeated, of several lengths.
func TestPrefixes(t *testing.T) {
	t.Parallel()
	for _, fill := range []byte{'a', ' ', '~', '/', '0', 0x80, 0xc3, 0xff} {
		for n := 0; n <= 25; n++ {
			base := strings.Repeat(string([]byte{fill}), n)
			for at := -1; at < n; at++ {
				for c := 0; c < 256; c++ {
					b := []byte(base)
					if at >= 0 {
						b[at] = byte(c)
					}
					s := string(b)
					if got, w := JSON(s), want(s, jsonByte); got != w {
						t.Fatalf("JSON(%q) = %d, want %d", s, got, w)
					}
					if got, w := JSONHTML(s), want(s, htmlByte); got != w {
						t.Fatalf("JSONHTML(%q) = %d, want %d", s, got, w)
					}
					if got, w := FieldValue(s), want(s, fieldByte); got != w {
						t.Fatalf("FieldValue(%q) = %d, want %d", s, got, w)
					}
				}
			}
		}
	}
}
