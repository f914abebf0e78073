// Package plainbytes skips, eight bytes at a time, the start of a string
// that needs no closer look: bytes a JSON encoder writes as they are, or
// that a header field value may hold. The
// hand-written encoders of the problem+json body and of the access line
// look at strings byte by byte, from a table; most of what they write
// (request IDs, paths, names) has nothing to escape, and testing a word
// at a time takes a few instructions per eight bytes instead of a few
// per byte. So does the check of every request field before it goes
// upstream.
package plainbytes

const (
	ones  = 0x0101010101010101 // 0x01 in every byte
	highs = 0x8080808080808080 // 0x80 in every byte
)

// JSON returns a length n such that s[:n] holds only printable ASCII
// other than '"' and '\\': bytes slog's JSON handler writes as they are.
// n is len(s), or a multiple of 8 where the next eight bytes hold one
// that may need escaping, or where fewer than eight are left: the caller
// goes on byte by byte from n.
func JSON(s string) int {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		if jsonStops(word(s, i)) != 0 {
			return i
		}
	}
	// The last word may overlap the one before: the caller's byte loop
	// is spared the tail of a plain string.
	if i < len(s) && len(s) >= 8 && jsonStops(word(s, len(s)-8)) == 0 {
		return len(s)
	}
	return i
}

// jsonStops sets a top bit in x when a byte of x may need escaping in
// JSON (see below).
func jsonStops(x uint64) uint64 {
	return (x - ones*0x20 | zero(x^(ones*'"')) | zero(x^(ones*'\\')) | x) & highs
}

// JSONHTML is JSON without '<', '>' and '&' either: what
// encoding/json writes as it is with HTML escaping on.
func JSONHTML(s string) int {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		if htmlStops(word(s, i)) != 0 {
			return i
		}
	}
	// The last word may overlap the one before: the caller's byte loop
	// is spared the tail of a plain string.
	if i < len(s) && len(s) >= 8 && htmlStops(word(s, len(s)-8)) == 0 {
		return len(s)
	}
	return i
}

// htmlStops is jsonStops for JSONHTML. '"' and '&' are the bytes that
// become '&' with bit 0x04 set, '<' and '>' those that become '>' with
// bit 0x02 set.
func htmlStops(x uint64) uint64 {
	return (x - ones*0x20 | zero(x|ones*0x04^ones*'&') | zero(x|ones*0x02^ones*'>') | zero(x^(ones*'\\')) | x) & highs
}

// FieldValue returns a length n, as JSON does, such that s[:n] holds no
// control character (bytes below 0x20, and 0x7f), which a header field
// value may not hold but for the tab. The caller checks the rest from n.
func FieldValue(s string) int {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		if fieldStops(word(s, i)) != 0 {
			return i
		}
	}
	// The last word may overlap the one before: the caller's byte loop
	// is spared the tail of a plain string.
	if i < len(s) && len(s) >= 8 && fieldStops(word(s, len(s)-8)) == 0 {
		return len(s)
	}
	return i
}

// fieldStops is jsonStops for FieldValue. A field value may hold bytes
// from 0x80 up: &^x leaves them out.
func fieldStops(x uint64) uint64 {
	return (x - ones*0x20 | zero(x^ones*0x7f)) &^ x & highs
}

// The tests take a word x and set the top bit of a byte of it when
// that byte is below 0x20 (x-ones*0x20), is one of the characters (zero),
// or is 0x80 or more (x). A subtraction borrows from the next byte up
// only where it sets a top bit already, so a word with none of those
// bytes sets no top bit: the test is exact for the word as a whole,
// though not byte by byte, which is why the caller looks at the bytes.

// word returns s[i:i+8] as a little-endian number; the compiler makes it
// one load.
func word(s string, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// zero sets the top bit of the lowest byte of y that is 0, from a byte
// below 0x80 (see above).
func zero(y uint64) uint64 { return y - ones }
