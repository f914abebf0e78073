package routes

import (
	"bytes"
	"encoding/binary"
	"math/bits"
)

// skipValue validates the JSON value at b[pos:], where depth containers
// are open, and returns the position after it, or -1.
//
// Most of a body is off the path, so this is where a scan spends its
// time. The common tokens, names, strings of plain ASCII, integers,
// literals, structure and whitespace, are taken by skipper.run, a loop
// that calls nothing, so that its state stays in registers; it stops for
// the rest (escapes and multibyte runes, fractions and exponents, negative
// numbers, every 63 levels of nesting, strings in the last 8 bytes of b),
// which skipValue does before running it again. No body
// can make either recurse. A value that is not an object or an array is
// read here, so that run only ever ends a value inside a container.
func (s *scanner) skipValue(pos, depth int) int {
	if pos >= len(s.b) {
		return -1
	}
	if c := s.b[pos]; c != '{' && c != '[' {
		return scanScalar(s.b, pos)
	}
	// Set field by field: a composite literal is built in a temporary
	// and copied. Every field but names is set; names is kept from the
	// values skipped before (see nameCache), but the first object of this
	// value turns nothing off.
	v := &s.skip
	v.b, v.pos, v.limit = s.b, pos, maxDepth-depth
	v.floor = nearFloor(v.limit)
	v.near = v.floor
	v.spilled, v.resume, v.names.armed = 0, atValue, false
	for {
		switch v.run() {
		case stopDone:
			return v.pos
		case stopInvalid:
			return -1
		case stopString:
			if v.pos = scanStringEnd(v.b, v.pos); v.pos < 0 {
				return -1
			}
		case stopNumber:
			if v.pos = scanNumber(v.b, v.pos); v.pos < 0 {
				return -1
			}
		case stopFraction:
			if v.pos = scanNumberTail(v.b, v.pos); v.pos < 0 {
				return -1
			}
		case stopPush:
			// near holds 63 levels above its floor of 1, or all that the
			// limit leaves: keep them below and start an empty word.
			d := v.spilled + 63 - bits.TrailingZeros64(v.floor)
			if d >= v.limit {
				return -1
			}
			s.kinds.spill(v.spilled/63, v.near)
			v.spilled = d
			v.floor = nearFloor(v.limit - d)
			v.near = v.floor
		case stopPop:
			// The word kept last was full, with a floor of 1.
			v.spilled -= 63
			v.near, v.floor = s.kinds.unspill(v.spilled/63), 1
		}
	}
}

// nearFloor is the empty stack of skipper.near for a value in which
// limit more containers may open: a sentinel bit that reaches bit 63,
// which makes run stop, when 63 containers are open, or limit if fewer.
func nearFloor(limit int) uint64 {
	if limit >= 63 {
		return 1
	}
	return 1 << (63 - limit)
}

// scanScalar validates the string, number or literal at b[pos:] and
// returns the position after it, or -1.
func scanScalar(b []byte, pos int) int {
	switch rest := b[pos:]; {
	case rest[0] == '"':
		return scanStringEnd(b, pos+1)
	case bytes.HasPrefix(rest, []byte("true")), bytes.HasPrefix(rest, []byte("null")):
		return pos + 4
	case bytes.HasPrefix(rest, []byte("false")):
		return pos + 5
	}
	return scanNumber(b, pos)
}

// skipper is skipValue's state between runs of its fast loop.
type skipper struct {
	b   []byte
	pos int
	// near is a stack of the containers open in the value, one bit each,
	// the innermost at bit 0: 1 for an object, 0 for an array. Above them
	// is a sentinel bit, alone in floor, the stack with none open.
	near    uint64
	floor   uint64
	spilled int // containers open below those in near, kept by skipValue
	limit   int // the most that may be open in the value
	resume  skipResume
	names   nameCache
}

// nameCache keeps, for the first 8 places of a member in an object, the
// last name that run read there in one word: the 8 bytes w it read from
// inside the name, which held the rest of the name, its quote and a
// colon. The bytes after the colon are set in rests and in words, so that
// w|rests[i] == words[i] says that w starts with the same bytes. The
// cache lives in the scanner and serves every value it skips: the names
// of one value's records and those of values that follow one another,
// as the members of an object on the path. An entry not yet kept is all
// zeros (the scanner starts zeroed, and skipValue does not set names): it
// matches only a word of 8 NUL bytes, which no valid name holds, and with
// a length of 0 it leaves pos on the NUL, which objValue then rejects as
// no value's start, as the scan of the name would have rejected it.
//
// A match needs no look at the bytes: they are those of an earlier name,
// where stringSpecial found that the ones before the quote stand for
// themselves, so again they are the rest of a name, its end and a colon,
// whatever object they are in. The place only chooses which name to
// compare with, so that those of records in an array, the same names in
// the same order, find theirs.
//
// Records that do not repeat their names would pay for a failed compare
// and a kept name at every name, more than the cache saves where it
// hits; see nameCacheOff for how run stops using it then.
type nameCache struct {
	words, rests [8]uint64
	lens         [8]uint8 // how many bytes words[i] has up to the colon's end
	// armed says that run kept a name in the value it skips: only then
	// does an object whose first name misses turn the cache off (see
	// nameCacheOff). The names kept come from the values skipped before
	// as well, and a value of another shape (a record of an array after
	// the object before it) would otherwise turn it off at its first
	// object.
	armed bool
}

// nameRests[i] has the bits set of the bytes of a word after a colon at
// byte i+1, the bytes that nameCache does not compare. Read from a table,
// the mask costs one load, where ^0<<(8i+16) cost a variable shift and
// the code Go adds for a count of 64.
var nameRests = [8]uint64{
	0xffffffffffff0000, 0xffffffffff000000, 0xffffffff00000000, 0xffffff0000000000,
	0xffff000000000000, 0xff00000000000000, 0, 0,
}

// nameCacheOff is skipper.run's place k after an object's first name was
// not the one that an earlier object had first, once run kept a name in
// the value it skips (nameCache.armed): its records do not repeat their
// names. Any k >= 8 leaves nameCache alone, neither compared nor kept,
// and names cost what they cost without it. Each object that opens
// shifts k right by 4: a place, at most 8, becomes 0, and nameCacheOff
// becomes 2^59, ..., 2^3, then 0, so the cache stays off for the rest of
// this object and the next 15, and the object after them tries it again. A body whose records do not
// repeat their names pays for a failed compare and a kept name once in
// 16 objects, and for a test of k at every name.
const nameCacheOff = 1 << 63

// skipStop is why skipper.run stopped: done, invalid, or a step it leaves
// to skipValue at pos.
type skipStop uint8

const (
	stopDone     skipStop = iota
	stopInvalid           // the body is not valid JSON
	stopString            // the rest of a string needs scanString
	stopNumber            // a number that does not start with a digit
	stopFraction          // a number's fraction or exponent
	stopPush              // near is full, and a container opens at pos
	stopPop               // near is empty, with containers kept below
)

// skipResume is where skipper.run takes up the scan again.
type skipResume uint8

const (
	atValue   skipResume = iota // a value starts at pos
	atAfter                     // a value ends at pos
	atObjStr                    // the rest of a member's string value starts at pos
	atArrStr                    // the rest of an element's string value starts at pos
	atName                      // the rest of a member name starts at pos
	atNameEnd                   // a member name ends at pos
)

// run scans until it is done or needs a step it leaves to skipValue.
// Positions are unsigned here, so that a comparison with len(b) is all
// the compiler needs to see that an index is in range.
//
// Values, strings and what follows them have a copy of their code for
// objects (obj...) and one for arrays (arr...), so that each knows what
// may come next; only a container's end looks at near to learn where it
// is.
func (v *skipper) run() skipStop {
	b, pos, near := v.b, uint(v.pos), v.near
	// With cap(b) == len(b), slicing b[pos:pos+8] checks one bound less.
	b = b[:len(b):len(b)]
	var c byte
	var stop skipStop
	var w uint64 // the 8 bytes of a string from pos
	var t uint   // where in w the byte is that ends it or needs a look (see objStr)
	var k uint   // the place in its object of the member whose name is next, as far as known (see nameCache)

	switch v.resume {
	case atAfter:
		goto after
	case atObjStr:
		goto objStr
	case atArrStr:
		goto arrStr
	case atName:
		goto name
	case atNameEnd:
		goto nameEnd
	}

arrValue: // An element starts at pos.
	if pos >= uint(len(b)) {
		return stopInvalid
	}
	c = b[pos]
	switch {
	case c-'0' <= 9:
		lead := c
		if pos++; pos >= uint(len(b)) {
			return stopInvalid
		}
		if c = b[pos]; c-'0' <= 9 && lead != '0' {
			for {
				if pos++; pos >= uint(len(b)) {
					return stopInvalid
				}
				if c = b[pos]; c-'0' > 9 {
					break
				}
			}
		}
		if c == ',' {
			pos++
			goto arrValue
		}
		if c == ']' {
			pos++
			goto closed
		}
		if c == '.' || c|0x20 == 'e' {
			stop, v.resume = stopFraction, atAfter
			goto exit
		}
		goto arrAfterByte
	case c == '"':
		pos++
		goto arrStr
	case c == '{':
		goto openObject
	case c == '[':
		goto openArray
	case c == 't':
		if uint(len(b))-pos < 4 || string(b[pos:pos+4]) != "true" {
			return stopInvalid
		}
		pos += 4
	case c == 'f':
		if uint(len(b))-pos < 5 || string(b[pos:pos+5]) != "false" {
			return stopInvalid
		}
		pos += 5
	case c == 'n':
		if uint(len(b))-pos < 4 || string(b[pos:pos+4]) != "null" {
			return stopInvalid
		}
		pos += 4
	case c == ' ' || c == '\t' || c == '\n' || c == '\r':
		// Last: compact bodies have no whitespace.
		pos = uint(skipSpaceLoop(b, int(pos)))
		goto arrValue
	default:
		stop, v.resume = stopNumber, atAfter
		goto exit
	}

arrAfter: // An element ends at pos.
	if pos >= uint(len(b)) {
		return stopInvalid
	}
	c = b[pos]
arrAfterByte: // An element ends at pos, where c is.
	if c == ',' {
		pos++
		goto arrValue
	}
	if c == ']' {
		pos++
		goto closed
	}
	if c == ' ' || c == '\t' || c == '\n' || c == '\r' {
		pos = uint(skipSpaceLoop(b, int(pos)))
		goto arrAfter
	}
	return stopInvalid

objValue: // A member's value starts at pos.
	if pos >= uint(len(b)) {
		return stopInvalid
	}
	c = b[pos]
objValueByte: // A member's value starts at pos, where c is.
	switch {
	case c-'0' <= 9:
		lead := c
		if pos++; pos >= uint(len(b)) {
			return stopInvalid
		}
		// A number of one digit is the most common, and one that starts
		// with 0 has no more.
		if c = b[pos]; c-'0' <= 9 && lead != '0' {
			for {
				if pos++; pos >= uint(len(b)) {
					return stopInvalid
				}
				if c = b[pos]; c-'0' > 9 {
					break
				}
			}
		}
		if c == ',' {
			pos++
			if pos < uint(len(b)) && b[pos] == '"' {
				pos++
				goto name
			}
			goto member
		}
		if c == '}' {
			// Most often the object is one of an array's, and the next
			// follows at once: then near stays as it is. Bit 1 of near
			// is the array, unless it is the floor (the object is the
			// value skipValue was given).
			if near&2 == 0 && near>>1 != v.floor && pos+4 <= uint(len(b)) &&
				binary.LittleEndian.Uint32(b[pos:pos+4]) == '}'|','<<8|'{'<<16|'"'<<24 {
				k >>= 4 // see nameCacheOff
				pos += 4
				goto name
			}
			pos++
			goto closed
		}
		if c == '.' || c|0x20 == 'e' {
			stop, v.resume = stopFraction, atAfter
			goto exit
		}
		goto objAfterByte
	case c == '"':
		pos++
		goto objStr
	case c == '{':
		goto openObject
	case c == '[':
		goto openArray
	case c == 't':
		// Most often the next member's name follows at once: the literal,
		// a comma and the name's quote are one word's first bytes.
		if pos+8 <= uint(len(b)) {
			if binary.LittleEndian.Uint64(b[pos:pos+8])&(1<<48-1) == 't'|'r'<<8|'u'<<16|'e'<<24|','<<32|'"'<<40 {
				pos += 6
				goto name
			}
		}
		if uint(len(b))-pos < 4 || string(b[pos:pos+4]) != "true" {
			return stopInvalid
		}
		pos += 4
	case c == 'f':
		// As for true.
		if pos+8 <= uint(len(b)) {
			if binary.LittleEndian.Uint64(b[pos:pos+8])&(1<<56-1) == 'f'|'a'<<8|'l'<<16|'s'<<24|'e'<<32|','<<40|'"'<<48 {
				pos += 7
				goto name
			}
		}
		if uint(len(b))-pos < 5 || string(b[pos:pos+5]) != "false" {
			return stopInvalid
		}
		pos += 5
	case c == 'n':
		// As for true.
		if pos+8 <= uint(len(b)) {
			if binary.LittleEndian.Uint64(b[pos:pos+8])&(1<<48-1) == 'n'|'u'<<8|'l'<<16|'l'<<24|','<<32|'"'<<40 {
				pos += 6
				goto name
			}
		}
		if uint(len(b))-pos < 4 || string(b[pos:pos+4]) != "null" {
			return stopInvalid
		}
		pos += 4
	case c == ' ' || c == '\t' || c == '\n' || c == '\r':
		pos = uint(skipSpaceLoop(b, int(pos)))
		goto objValue
	default:
		stop, v.resume = stopNumber, atAfter
		goto exit
	}

objAfter: // A member's value ends at pos.
	if pos >= uint(len(b)) {
		return stopInvalid
	}
	c = b[pos]
objAfterByte: // A member's value ends at pos, where c is.
	if c == ',' {
		pos++
		if pos < uint(len(b)) && b[pos] == '"' {
			pos++
			goto name
		}
		goto member
	}
	if c == '}' {
		pos++
		goto closed
	}
	if c == ' ' || c == '\t' || c == '\n' || c == '\r' {
		pos = uint(skipSpaceLoop(b, int(pos)))
		goto objAfter
	}
	return stopInvalid

openObject: // An object opens at pos.
	if int64(near) < 0 {
		stop, v.resume = stopPush, atValue
		goto exit
	}
	near = near<<1 | 1
	k >>= 4 // see nameCacheOff
	if pos++; pos < uint(len(b)) && b[pos] == '"' {
		pos++
		goto name
	}
	if pos < uint(len(b)) && b[pos] <= ' ' {
		pos = uint(skipSpaceLoop(b, int(pos)))
	}
	if pos < uint(len(b)) && b[pos] == '}' {
		pos++
		goto closed
	}
	goto member

openArray: // An array opens at pos.
	if int64(near) < 0 {
		stop, v.resume = stopPush, atValue
		goto exit
	}
	near <<= 1
	if pos++; pos < uint(len(b)) && b[pos] <= ' ' {
		pos = uint(skipSpaceLoop(b, int(pos)))
	}
	if pos < uint(len(b)) && b[pos] == ']' {
		pos++
		goto closed
	}
	goto arrValue

closed: // The innermost container closed just before pos.
	if near >>= 1; near == v.floor {
		v.pos, v.near = int(pos), near
		if v.spilled == 0 {
			return stopDone
		}
		v.resume = atAfter
		return stopPop
	}
	if near&1 != 0 {
		goto objAfter
	}
	// In an array, the next element is most often an object whose first
	// name follows at once. A container has just closed, so near has room
	// for the one that opens (its top bit is clear, which openObject
	// checks).
	if pos+3 <= uint(len(b)) {
		if q := b[pos : pos+3]; q[0] == ',' && q[1] == '{' && q[2] == '"' {
			near = near<<1 | 1
			k >>= 4 // see nameCacheOff
			pos += 3
			goto name
		}
	}
	goto arrAfter

after: // A value ends at pos, in the container near tells.
	if near&1 != 0 {
		goto objAfter
	}
	goto arrAfter

member: // A member name starts at pos.
	if pos >= uint(len(b)) {
		return stopInvalid
	}
	if c = b[pos]; c == '"' {
		pos++
		goto name
	}
	if c <= ' ' {
		if pos = uint(skipSpaceLoop(b, int(pos))); pos >= uint(len(b)) {
			return stopInvalid
		}
		c = b[pos]
	}
	if c != '"' {
		return stopInvalid
	}
	pos++

name: // The rest of a member name starts at pos.
	// As for objStr below; most often the colon follows at once.
	if pos+8 > uint(len(b)) {
		stop, v.resume = stopString, atNameEnd
		goto exit
	}
	w = binary.LittleEndian.Uint64(b[pos : pos+8])
	if k >= uint(len(v.names.words)) {
		goto namePlain // the cache is off, or the place is past it
	}
	// Objects in an array most often have the same names in the same
	// order: when these bytes are those of the name last read at this
	// place, they are again the rest of a name and a colon (see
	// nameCache).
	if w|v.names.rests[k] == v.names.words[k] {
		pos += uint(v.names.lens[k])
		k++
		goto objValue
	}
	if m := stringSpecial(w); m != 0 {
		t = uint(bits.TrailingZeros64(m))
		pos += t >> 3
		t &= 56
		if uint16(w>>t) == '"'|':'<<8 {
			// Keep the bytes up to the colon for the next object. An
			// object whose first name is not the one kept first turns
			// the cache off for a while (see nameCacheOff).
			turned := k == 0 && v.names.armed
			v.names.armed = true
			rest := nameRests[t>>3]
			v.names.words[k], v.names.rests[k], v.names.lens[k] = w|rest, rest, uint8(t>>3+2)
			k++
			if turned {
				k = nameCacheOff
			}
			pos += 2
			goto objValue
		}
		w >>= t
		goto nameMark
	}
	pos += 8
	goto name

namePlain: // As name from its load of w on, without nameCache.
	if m := stringSpecial(w); m != 0 {
		t = uint(bits.TrailingZeros64(m))
		pos += t >> 3
		w >>= t & 56
		if uint16(w) == '"'|':'<<8 {
			pos += 2
			goto objValue
		}
		goto nameMark
	}
	pos += 8
	goto name

nameMark: // A member name has a mark, not its quote and a colon, at pos, and w is shifted to it.
	if uint8(w) == '"' {
		pos++
		goto nameEnd
	}
	stop, v.resume = stopString, atNameEnd
	goto exit

nameEnd: // A member name ends at pos.
	if pos < uint(len(b)) && b[pos] == ':' {
		pos++
		if pos < uint(len(b)) {
			if c = b[pos]; c > ' ' {
				goto objValueByte
			}
		}
		goto objValue
	}
	if pos = uint(skipSpace(b, int(pos))); pos >= uint(len(b)) || b[pos] != ':' {
		return stopInvalid
	}
	pos++
	goto objValue

objStr: // The rest of a member's string value starts at pos.
	// A string is taken 8 bytes a step, in w. The lowest mark of
	// stringSpecial is exact: the bytes below it stand for themselves, so
	// the string ends there when it is a quote, and otherwise scanString
	// goes on from it. The mark is its byte's high bit, so the count of
	// trailing zeros is 8i+7: shifted by 3 it is i, added to pos at once,
	// as the next token waits for pos; masked with 56 it is 8i (which
	// also shows the compiler that the shift is below 64), and w shifted
	// by it has that byte and the ones after it in w at the bottom, zeros
	// above, which no comparison below takes for a quote, comma or colon.
	// w is shifted in place, as nothing needs it whole after that: a
	// shift of a copy costs a move. Fewer than 8 bytes left: scanString.
	if pos+8 > uint(len(b)) {
		stop, v.resume = stopString, atAfter
		goto exit
	}
	w = binary.LittleEndian.Uint64(b[pos : pos+8])
	if m := stringSpecial(w); m != 0 {
		t = uint(bits.TrailingZeros64(m))
		pos += t >> 3
		w >>= t & 56
		// Most often the next member's name follows at once.
		if uint32(w)&0xffffff == '"'|','<<8|'"'<<16 {
			pos += 3
			goto name
		}
		if uint8(w) == '"' {
			pos++
			goto objAfter
		}
		stop, v.resume = stopString, atAfter
		goto exit
	}
	pos += 8
	goto objStr

arrStr: // The rest of an element's string value starts at pos.
	if pos+8 > uint(len(b)) {
		stop, v.resume = stopString, atAfter
		goto exit
	}
	w = binary.LittleEndian.Uint64(b[pos : pos+8])
	if m := stringSpecial(w); m != 0 {
		t = uint(bits.TrailingZeros64(m))
		pos += t >> 3
		t &= 56
		if uint8(w>>t) == '"' {
			pos++
			goto arrAfter
		}
		stop, v.resume = stopString, atAfter
		goto exit
	}
	pos += 8
	goto arrStr

exit:
	v.pos, v.near = int(pos), near
	return stop
}
