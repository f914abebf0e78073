package routes

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"sync"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// maxDepth is how deep objects and arrays may nest in a body read for
// json: keys: jsontext's bound, so a body is valid here when a strict
// decoder takes it.
const maxDepth = 10000

// scanStatus is what a scan made of a body.
type scanStatus uint8

const (
	scanInvalid   scanStatus = iota // not one JSON value
	scanValid                       // one JSON value; the path's value, if any, found
	scanDuplicate                   // a name on the path twice in one object
)

// scanner is one walk of a body along a json: path, in a single pass
// without recursion. Values off the path are only validated, never
// decoded. The zero value with b and path set is ready; it lives on the
// caller's stack, and release must be called after the walk.
type scanner struct {
	b     []byte
	path  [][]byte
	kinds kindStack
	// skip is skipValue's state, kept from one value to the next so that
	// its nameCache serves every value skipped in the walk (the members
	// of an object on the path, each a record with the same names), and
	// so that each value does not zero it anew.
	skip skipper
}

// walk validates the whole body and returns the raw value at the path
// (nil when absent).
//
// The containers it opens itself are the ones on the path, so every open
// one at depth d is the value at path[:d]; the rest is consumed by
// skipValue. seen tells whether the innermost open container already gave
// its path element: a matching member name (a second one is a duplicate)
// or, for an array, the element at the wanted index. A container that
// closes was its parent's path element, so its parent has seen it.
func (s *scanner) walk() ([]byte, scanStatus) {
	b, path := s.b, s.path
	var found []byte
	depth, want, idx := 0, -1, 0
	seen, sel := false, true // sel: the value at pos is at path[:depth]
	pos := skipSpace(b, 0)
value:
	for {
		// A value starts at pos.
		if pos >= len(b) {
			return nil, scanInvalid
		}
		switch c := b[pos]; {
		case sel && depth == len(path):
			end := s.skipValue(pos, depth)
			if end < 0 {
				return nil, scanInvalid
			}
			found, pos = b[pos:end], end
		case sel && (c == '{' || c == '['):
			if depth == maxDepth {
				return nil, scanInvalid
			}
			depth++
			s.kinds.set(depth, c == '{')
			seen = false
			if pos = skipSpace(b, pos+1); pos < len(b) && b[pos] == c+2 { // '{'+2 is '}', '['+2 is ']'
				pos++
				depth--
				seen = true
				break
			}
			if c == '[' {
				want, idx = arrayIndex(path[depth-1]), 0
				sel = want == 0
				continue
			}
			var st scanStatus
			if pos, sel, st = s.member(pos, path[depth-1], seen); st != scanValid {
				return nil, st
			}
			seen = seen || sel
			continue
		default:
			// A value off the path. Most often it is a member of an
			// object on the path, and the next member's name follows at
			// once: read it here, and skip its value too unless it is on
			// the path, without the rounds of the loops below and above.
			// Anything else after the value is for the loop below.
			for {
				if pos = s.skipValue(pos, depth); pos < 0 {
					return nil, scanInvalid
				}
				if depth == 0 || pos+1 >= len(b) || b[pos] != ',' || b[pos+1] != '"' || !s.kinds.object(depth) {
					break
				}
				var st scanStatus
				if pos, sel, st = s.member(pos+1, path[depth-1], seen); st != scanValid {
					return nil, st
				}
				if sel {
					seen = true
					continue value
				}
			}
		}
		// After a value: close the containers it ends, then go to the
		// next value.
	next:
		for {
			pos = skipSpace(b, pos)
			if depth == 0 {
				if pos != len(b) {
					return nil, scanInvalid // trailing data
				}
				return found, scanValid
			}
			if pos >= len(b) {
				return nil, scanInvalid
			}
			obj := s.kinds.object(depth)
			switch c := b[pos]; {
			case c == ',':
				pos = skipSpace(b, pos+1)
				if !obj {
					idx++
					sel = !seen && idx == want
					break next
				}
				var st scanStatus
				if pos, sel, st = s.member(pos, path[depth-1], seen); st != scanValid {
					return nil, st
				}
				seen = seen || sel
				break next
			case obj && c == '}', !obj && c == ']':
				pos++
				depth--
				seen = true
			default:
				return nil, scanInvalid
			}
		}
	}
}

// member reads the member name at pos, compares it with want and returns
// the position of the member's value and whether it is on the path. A
// second match, when seen, is a duplicate.
//
// It takes the most common member at once: a plain ASCII name of up to
// 15 bytes (as memberSlow reads it from one or two words), and a colon
// and the value's first byte right after it. Anything else, and a name
// shorter than a want with runes beyond ASCII (which may match it: see
// memberSlow), is left to memberSlow from the start. That call is the
// only one, and the last step, with nothing to keep across it, so the
// compiler keeps more of the arguments in registers; with the calls of
// memberSlow in the same function, it saved them all to the stack on
// entry, which cost about a fifth of a member's instructions.
func (s *scanner) member(pos int, want []byte, seen bool) (int, bool, scanStatus) {
	b := s.b
	if p := pos + 1; pos < len(b) && b[pos] == '"' && len(b)-p >= 16 {
		w := binary.LittleEndian.Uint64(b[p:])
		m := stringSpecial(w)
		n := 0 // where w starts in the name
		if m == 0 {
			n = 8
			w = binary.LittleEndian.Uint64(b[p+8:])
			m = stringSpecial(w)
		}
		if m != 0 {
			i := bits.TrailingZeros64(m) >> 3
			n += i
			// The name, its quote, a colon and the value's first byte.
			if byte(w>>(i*8)) == '"' && p+n+2 < len(b) && b[p+n+1] == ':' && b[p+n+2] > ' ' {
				sel := false
				if n == len(want) {
					sel = equalFoldASCII(b[p:p+n], want)
				} else if n < len(want) {
					// Only a rune beyond ASCII in want can match a
					// shorter name.
					for _, c := range want {
						if c >= utf8.RuneSelf {
							return s.memberSlow(pos, want, seen)
						}
					}
				}
				if sel && seen {
					return 0, false, scanDuplicate
				}
				return p + n + 2, sel, scanValid
			}
		}
	}
	return s.memberSlow(pos, want, seen)
}

// memberSlow is member for every name and what follows it.
func (s *scanner) memberSlow(pos int, want []byte, seen bool) (int, bool, scanStatus) {
	b := s.b
	if pos >= len(b) || b[pos] != '"' {
		return 0, false, scanInvalid
	}
	pos++
	var sel bool
	// Most names are short plain ASCII: when the lowest mark of
	// stringSpecial in the word at the name's start is a quote, the bytes
	// before it are the whole name, printable ASCII without escapes. A
	// word without a mark is 8 such bytes, so a name of 8 to 15 bytes is
	// read as well from the next word, whose lowest mark is as exact.
	// Longer names, and names with escapes or bytes beyond ASCII, are left
	// to scanString.
	//
	// Such a name equals want in any letter case byte for byte, as
	// bytes.EqualFold compares ASCII, except that a rune of want beyond
	// ASCII may fold to an ASCII one (the Kelvin sign to "k"): longer in
	// bytes than the letter it matches, so only a longer want needs
	// bytes.EqualFold, and at equal lengths a byte beyond ASCII matches
	// nothing. (The compare is written out in each place, here and in
	// member: as a function of its own it was not inlined, and cost a
	// call a name.)
	if len(b)-pos >= 8 {
		w := binary.LittleEndian.Uint64(b[pos:])
		if m := stringSpecial(w); m != 0 {
			n := bits.TrailingZeros64(m) >> 3
			if byte(w>>(n*8)) == '"' {
				name := b[pos : pos+n]
				pos += n + 1
				if n == len(want) {
					sel = equalFoldASCII(name, want)
				} else if n < len(want) {
					sel = bytes.EqualFold(name, want)
				}
				goto nameRead
			}
		} else if len(b)-pos >= 16 {
			w = binary.LittleEndian.Uint64(b[pos+8:])
			if m := stringSpecial(w); m != 0 {
				n := 8 + bits.TrailingZeros64(m)>>3
				if byte(w>>((n-8)*8)) == '"' {
					name := b[pos : pos+n]
					pos += n + 1
					if n == len(want) {
						sel = equalFoldASCII(name, want)
					} else if n < len(want) {
						sel = bytes.EqualFold(name, want)
					}
					goto nameRead
				}
			}
		}
	}
	{
		end, esc := scanString(b, pos)
		if end < 0 {
			return 0, false, scanInvalid
		}
		sel = matchName(b[pos:end-1], esc, want)
		pos = end
	}
nameRead:
	if sel && seen {
		return 0, false, scanDuplicate
	}
	pos = skipSpace(b, pos)
	if pos >= len(b) || b[pos] != ':' {
		return 0, false, scanInvalid
	}
	return skipSpace(b, pos+1), sel, scanValid
}

// matchName reports whether the member name (between its quotes, with
// escapes when esc) equals want in any letter case, Unicode simple folding
// included (as encoding/json matches "K", the Kelvin sign, to "k"). An
// escaped name is compared a rune at a time as it is decoded, rune for
// rune as bytes.EqualFold pairs them: unescaped into a buffer, a name
// longer than the buffer, compared with a long want (a whole dotted
// path), cost an allocation.
func matchName(name []byte, esc bool, want []byte) bool {
	if !esc {
		return bytes.EqualFold(name, want)
	}
	for len(name) > 0 && len(want) > 0 {
		var r rune
		r, name = nextNameRune(name)
		w, n := utf8.DecodeRune(want)
		want = want[n:]
		if !equalFoldRune(r, w) {
			return false
		}
	}
	return len(name) == 0 && len(want) == 0
}

// nextNameRune decodes the first rune of a validated string's contents s,
// an escape or UTF-8, and returns it with the rest of s.
func nextNameRune(s []byte) (rune, []byte) {
	if s[0] != '\\' {
		r, n := utf8.DecodeRune(s)
		return r, s[n:]
	}
	switch c := s[1]; c {
	case 'b':
		return '\b', s[2:]
	case 'f':
		return '\f', s[2:]
	case 'n':
		return '\n', s[2:]
	case 'r':
		return '\r', s[2:]
	case 't':
		return '\t', s[2:]
	case 'u':
		r, _ := hex4(s, 2)
		if !utf16.IsSurrogate(r) {
			return r, s[6:]
		}
		r2, _ := hex4(s, 8)
		return utf16.DecodeRune(r, r2), s[12:]
	default: // '"', '\\', '/'
		return rune(c), s[2:]
	}
}

// equalFoldRune reports whether runes a and b are equal under Unicode
// simple case folding, as bytes.EqualFold compares each pair.
func equalFoldRune(a, b rune) bool {
	if a == b {
		return true
	}
	if b < a {
		a, b = b, a
	}
	if b < utf8.RuneSelf {
		return 'A' <= a && a <= 'Z' && b == a+'a'-'A'
	}
	r := unicode.SimpleFold(a)
	for r != a && r < b {
		r = unicode.SimpleFold(r)
	}
	return r == b
}

// equalFoldASCII reports whether the ASCII name and want, of the same
// length, are equal in any letter case. A byte of want beyond ASCII
// matches no byte of name.
func equalFoldASCII(name, want []byte) bool {
	for i, c := range name {
		// c and d differ only in bit 5 and c is a letter: one is the
		// other's upper case.
		if d := want[i]; c != d && (c^d != 0x20 || (c|0x20)-'a' > 'z'-'a') {
			return false
		}
	}
	return true
}

// arrayIndex is the array index a path element names, as strconv.Atoi
// reads it, or -1 when it names none.
func arrayIndex(p []byte) int {
	if len(p) > 0 && (p[0] == '+' || p[0] == '-') {
		neg := p[0] == '-'
		p = p[1:]
		if neg {
			// Atoi takes "-0" and "-000" as 0, any other digits as
			// negative or out of range.
			if len(p) == 0 || len(bytes.TrimLeft(p, "0")) != 0 {
				return -1
			}
		}
	}
	if len(p) == 0 {
		return -1
	}
	const maxInt = int(^uint(0) >> 1)
	n := 0
	for _, c := range p {
		d := int(c) - '0'
		if d < 0 || d > 9 || n > (maxInt-d)/10 {
			return -1
		}
		n = n*10 + d
	}
	return n
}

// scanStringEnd is scanString for strings whose escapes do not matter.
func scanStringEnd(b []byte, pos int) int {
	pos, _ = scanString(b, pos)
	return pos
}

// jsonSpace is the whitespace of RFC 8259.
var jsonSpace = [256]bool{' ': true, '\t': true, '\n': true, '\r': true}

// skipSpace returns the position of the first byte at or after pos that
// is not whitespace. Compact bodies have none, so that case is inlined.
func skipSpace(b []byte, pos int) int {
	if pos < len(b) && b[pos] > ' ' {
		return pos
	}
	return skipSpaceLoop(b, pos)
}

func skipSpaceLoop(b []byte, pos int) int {
	for pos < len(b) && jsonSpace[b[pos]] {
		pos++
	}
	return pos
}

// stringPlain marks the bytes that stand for themselves in a string:
// printable ASCII but the quote and the backslash.
var stringPlain = func() (t [256]bool) {
	for c := ' '; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

const (
	lows  = 0x0101010101010101
	highs = 0x8080808080808080
	lows7 = 0x7f7f7f7f7f7f7f7f // all but the high bit of each byte
)

// stringSpecial marks, by its high bit, each byte of the 8 in w that
// does not stand for itself in a string: a quote, a backslash, a control
// character or a byte of a multibyte rune. Every such byte is marked;
// marks above the lowest one may also be false, so a mark is a place to
// look, not an answer. No other bit is set.
//
// A byte b that no borrow reaches gets its mark from (b^2)-0x21 when it
// is a control character or a quote (b^2 is then below 0x21, and no other
// byte below 0x80 is: flipping bit 1 turns the quote into 0x20 and keeps
// the control characters below 0x20, the space is 0x22 and '!' 0x23), from
// b^'\\'-1 when it is a backslash and from b itself when it is 0x80 or
// more. A borrow comes only from a marked byte below, and only lowers a
// byte's difference, so it takes no mark away.
func stringSpecial(w uint64) uint64 {
	k := &specialConsts
	quoteOrControl := (w ^ k.twos) + k.minus21s
	backslash := (w ^ k.backslashes) + k.minusLows
	return (quoteOrControl | backslash | w) & k.highs
}

// specialConsts are stringSpecial's constants, in a variable that is
// never written. On amd64 only a MOV takes a 64-bit constant, so the
// compiler, which does not keep constants in registers from one use to
// the next, would spend an instruction on each at every use, 5 of the 14
// the function takes; read from memory, each is an operand of the
// instruction that uses it.
var specialConsts = struct{ twos, minus21s, backslashes, minusLows, highs uint64 }{
	twos:        2 * lows,
	minus21s:    -0x21 * lows & (1<<64 - 1),
	backslashes: '\\' * lows,
	minusLows:   -lows & (1<<64 - 1),
	highs:       highs,
}

// scanString validates the rest of a string whose opening quote is just
// before pos and returns the position after its closing quote (or -1)
// and whether it holds escapes. The string must be valid UTF-8, escapes
// of UTF-16 surrogates must pair up, and control characters must be
// escaped. It looks at 8 bytes a step while they stand for themselves.
func scanString(b []byte, pos int) (int, bool) {
	esc := false
	for {
		for len(b)-pos >= 8 {
			if m := stringSpecial(binary.LittleEndian.Uint64(b[pos:])); m != 0 {
				pos += bits.TrailingZeros64(m) >> 3
				break
			}
			pos += 8
		}
		for pos < len(b) && stringPlain[b[pos]] {
			pos++
		}
		if pos >= len(b) {
			return -1, esc
		}
		switch c := b[pos]; {
		case c == '"':
			return pos + 1, esc
		case c == '\\':
			esc = true
			if pos = scanEscape(b, pos); pos < 0 {
				return -1, esc
			}
		case c < ' ':
			return -1, esc
		default:
			r, n := utf8.DecodeRune(b[pos:])
			if r == utf8.RuneError && n == 1 {
				return -1, esc
			}
			pos += n
		}
	}
}

// scanEscape validates the escape at b[pos:], which starts with a
// backslash, and returns the position after it, or -1.
func scanEscape(b []byte, pos int) int {
	if pos+1 >= len(b) {
		return -1
	}
	switch b[pos+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return pos + 2
	case 'u':
		r, ok := hex4(b, pos+2)
		if !ok {
			return -1
		}
		if pos += 6; !utf16.IsSurrogate(r) {
			return pos
		}
		if pos+1 >= len(b) || b[pos] != '\\' || b[pos+1] != 'u' {
			return -1
		}
		r2, ok := hex4(b, pos+2)
		if !ok || utf16.DecodeRune(r, r2) == utf8.RuneError {
			return -1
		}
		return pos + 6
	}
	return -1
}

// hex4 reads the four hex digits at b[pos:].
func hex4(b []byte, pos int) (rune, bool) {
	if len(b)-pos < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[pos : pos+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// scanNumber validates the number at b[pos:] and returns the position
// after it, or -1: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func scanNumber(b []byte, pos int) int {
	if pos < len(b) && b[pos] == '-' {
		pos++
	}
	if pos >= len(b) {
		return -1
	}
	switch c := b[pos]; {
	case c == '0':
		pos++
	case '1' <= c && c <= '9':
		pos = skipDigits(b, pos+1)
	default:
		return -1
	}
	return scanNumberTail(b, pos)
}

// scanNumberTail validates the fraction and exponent, if any, of the
// number whose integer part ends at pos.
func scanNumberTail(b []byte, pos int) int {
	if pos < len(b) && b[pos] == '.' {
		start := pos + 1
		if pos = skipDigits(b, start); pos == start {
			return -1
		}
	}
	if pos < len(b) && (b[pos] == 'e' || b[pos] == 'E') {
		pos++
		if pos < len(b) && (b[pos] == '+' || b[pos] == '-') {
			pos++
		}
		start := pos
		if pos = skipDigits(b, start); pos == start {
			return -1
		}
	}
	return pos
}

func skipDigits(b []byte, pos int) int {
	for pos < len(b) && '0' <= b[pos] && b[pos] <= '9' {
		pos++
	}
	return pos
}

// appendUnquoted appends the text of a validated string's contents s
// (between its quotes), its escapes decoded. It stops, reporting false,
// before the text grows longer than limit bytes, or just after, by one
// decoded escape.
func appendUnquoted(dst, s []byte, limit int) ([]byte, bool) {
	limit += len(dst)
	for {
		i := bytes.IndexByte(s, '\\')
		if i < 0 {
			i = len(s)
		}
		if len(dst)+i > limit {
			return dst, false
		}
		if dst = append(dst, s[:i]...); i == len(s) {
			return dst, true
		}
		c := s[i+1]
		s = s[i+2:]
		switch c {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, _ := hex4(s, 0)
			s = s[4:]
			if utf16.IsSurrogate(r) {
				r2, _ := hex4(s, 2)
				r = utf16.DecodeRune(r, r2)
				s = s[6:]
			}
			dst = utf8.AppendRune(dst, r)
		default: // '"', '\\', '/'
			dst = append(dst, c)
		}
		if len(dst) > limit {
			return dst, false
		}
	}
}

// kindStack tells, for each depth of open containers, whether the one
// there is an object. The first 64 depths are kept inline; deeper ones,
// which few bodies reach, in a pooled array.
type kindStack struct {
	near uint64
	far  *[maxDepth/64 + 1]uint64

	// spills keeps, for values off the path nested deeper than 63
	// levels, the full words of skipper.near below the one in use.
	spills *[maxDepth/63 + 1]uint64
}

var (
	farKinds   = sync.Pool{New: func() any { return new([maxDepth/64 + 1]uint64) }}
	nearSpills = sync.Pool{New: func() any { return new([maxDepth/63 + 1]uint64) }}
)

// spill keeps w, the i-th word of skipper.near from the outside in.
func (k *kindStack) spill(i int, w uint64) {
	if k.spills == nil {
		k.spills = nearSpills.Get().(*[maxDepth/63 + 1]uint64)
	}
	k.spills[i] = w
}

// unspill is the i-th word kept by spill.
func (k *kindStack) unspill(i int) uint64 { return k.spills[i] }

func (k *kindStack) set(depth int, obj bool) {
	if depth >= 64 {
		k.setFar(depth, obj)
		return
	}
	if bit := uint64(1) << depth; obj {
		k.near |= bit
	} else {
		k.near &^= bit
	}
}

func (k *kindStack) setFar(depth int, obj bool) {
	if k.far == nil {
		k.far = farKinds.Get().(*[maxDepth/64 + 1]uint64)
	}
	if bit := uint64(1) << (depth & 63); obj {
		k.far[depth>>6] |= bit
	} else {
		k.far[depth>>6] &^= bit
	}
}

func (k *kindStack) object(depth int) bool {
	if depth < 64 {
		return k.near>>depth&1 != 0
	}
	return k.far[depth>>6]>>(depth&63)&1 != 0
}

// release returns the deep part of the stack to its pool.
func (k *kindStack) release() {
	if k.far != nil {
		farKinds.Put(k.far)
		k.far = nil
	}
	if k.spills != nil {
		nearSpills.Put(k.spills)
		k.spills = nil
	}
}
