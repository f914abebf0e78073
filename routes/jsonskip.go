package routes

import (
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
// numbers, nesting from 64 levels on, the masks of the next 64 bytes),
// which skipValue does before running it again. No body can make either
// recurse.
func (s *scanner) skipValue(pos, depth int) int {
	v := skipper{b: s.b, pos: pos, limit: maxDepth - depth, blk: minBlock, resume: atValue}
	for {
		switch v.run() {
		case stopDone:
			return v.pos
		case stopInvalid:
			return -1
		case stopBlock:
			v.stops = blockStops(v.b, v.blk)
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
			s.kinds.setFar(depth+v.depth, v.closer == '}')
		case stopPop:
			v.closer = ']'
			if s.kinds.object(depth + v.depth) {
				v.closer = '}'
			}
		}
	}
}

// skipper is skipValue's state between runs of its fast loop.
type skipper struct {
	b      []byte
	pos    int
	depth  int    // containers open in the value
	limit  int    // the most that may be open in the value
	near   uint64 // bit i: the container at depth-i (< 64) is an object
	closer byte   // of the innermost container open: '}' or ']'
	resume skipResume

	// stops marks the bytes of the 64 from blk where a string ends or
	// needs a closer look (see blockStops).
	blk   int
	stops uint64
}

// skipStop is why skipper.run stopped: done, invalid, or a step it leaves
// to skipValue at pos.
type skipStop uint8

const (
	stopDone     skipStop = iota
	stopInvalid           // the body is not valid JSON
	stopBlock             // the masks of the block holding pos are needed
	stopString            // the rest of a string needs scanString
	stopNumber            // a number that does not start with a digit
	stopFraction          // a number's fraction or exponent
	stopPush              // depth, 64 or more, was opened: the kind to record
	stopPop               // depth, 64 or more, is again the innermost: its closer
)

// skipResume is where skipper.run takes up the scan again.
type skipResume uint8

const (
	atValue   skipResume = iota // a value starts at pos
	atAfter                     // a value ends at pos
	atString                    // the rest of a string value starts at pos
	atName                      // the rest of a member name starts at pos
	atNameEnd                   // a member name ends at pos
	atOpened                    // the container at depth opened just before pos
)

// minBlock is a block start that no position is in.
const minBlock = -1 << 62

// run scans until it is done or needs a step it leaves to skipValue.
func (v *skipper) run() skipStop {
	b, pos, depth := v.b, v.pos, v.depth
	near, closer := v.near, v.closer
	blk, stops := v.blk, v.stops
	var c byte
	var stop skipStop
	var off uint
	inName := false // the block to refill holds a member name, else a string value

	switch v.resume {
	case atAfter:
		goto after
	case atString:
		goto str
	case atName:
		goto name
	case atNameEnd:
		goto nameEnd
	case atOpened:
		goto opened
	}

value: // A value starts at pos.
	if pos >= len(b) {
		return stopInvalid
	}
	if c = b[pos]; c <= ' ' {
		if pos = skipSpaceLoop(b, pos); pos >= len(b) {
			return stopInvalid
		}
		c = b[pos]
	}
	switch {
	case c == '"':
		pos++
		goto str
	case c-'0' <= 9:
		pos++
		if c != '0' {
			for pos < len(b) && b[pos]-'0' <= 9 {
				pos++
			}
		}
		if pos < len(b) && (b[pos] == '.' || b[pos]|0x20 == 'e') {
			stop, v.resume = stopFraction, atAfter
			goto exit
		}
	case c == '{' || c == '[':
		if depth == v.limit {
			return stopInvalid
		}
		depth++
		pos++
		closer = c + 2 // '{'+2 is '}', '['+2 is ']'
		if depth >= 64 {
			stop, v.resume = stopPush, atOpened
			goto exit
		}
		near = near<<1 | b2u(c == '{')
		goto opened
	case c == 't':
		if len(b)-pos < 4 || string(b[pos:pos+4]) != "true" {
			return stopInvalid
		}
		pos += 4
	case c == 'f':
		if len(b)-pos < 5 || string(b[pos:pos+5]) != "false" {
			return stopInvalid
		}
		pos += 5
	case c == 'n':
		if len(b)-pos < 4 || string(b[pos:pos+4]) != "null" {
			return stopInvalid
		}
		pos += 4
	default:
		stop, v.resume = stopNumber, atAfter
		goto exit
	}

after: // A value ends at pos: close the containers it ends, go to the next.
	if depth == 0 {
		v.pos = pos
		return stopDone
	}
	if pos >= len(b) {
		return stopInvalid
	}
	switch c = b[pos]; c {
	case ',':
		pos++
		if closer == '}' {
			goto member
		}
		goto value
	case closer:
		pos++
		goto closed
	case ' ', '\t', '\n', '\r':
		pos = skipSpaceLoop(b, pos)
		goto after
	}
	return stopInvalid

opened: // The container at depth opened just before pos.
	if pos < len(b) && b[pos] <= ' ' {
		pos = skipSpaceLoop(b, pos)
	}
	if pos < len(b) && b[pos] == closer {
		pos++
		goto closed
	}
	if closer == '}' {
		goto member
	}
	goto value

closed: // The container at depth closed just before pos.
	if depth < 64 {
		near >>= 1
	}
	if depth--; depth > 0 {
		if depth >= 64 {
			stop, v.resume = stopPop, atAfter
			goto exit
		}
		closer = '}'
		if near&1 == 0 {
			closer = ']'
		}
	}
	goto after

member: // A member name starts at pos.
	if pos >= len(b) {
		return stopInvalid
	}
	if c = b[pos]; c <= ' ' {
		if pos = skipSpaceLoop(b, pos); pos >= len(b) {
			return stopInvalid
		}
		c = b[pos]
	}
	if c != '"' {
		return stopInvalid
	}
	pos++

name: // The rest of a member name starts at pos.
	// As for str below.
	if off = uint(pos - blk); off >= 64 {
		inName = true
		goto refill
	}
	if q := stops >> off; q != 0 {
		if end := pos + bits.TrailingZeros64(q); end < len(b) && b[end] == '"' {
			pos = end + 1
			goto nameEnd
		}
	} else if blk+64 < len(b) {
		pos = blk + 64
		goto name
	}
	stop, v.resume = stopString, atNameEnd
	goto exit

nameEnd: // A member name ends at pos.
	if pos < len(b) && b[pos] == ':' {
		pos++
		goto value
	}
	if pos = skipSpace(b, pos); pos >= len(b) || b[pos] != ':' {
		return stopInvalid
	}
	pos++
	goto value

str: // The rest of a string value starts at pos.
	// The masks of the block holding pos give the string's end without a
	// load that waits for pos: the next quote, when no byte before it
	// needs a closer look.
	if off = uint(pos - blk); off >= 64 {
		inName = false
		goto refill
	}
	if q := stops >> off; q != 0 {
		if end := pos + bits.TrailingZeros64(q); end < len(b) && b[end] == '"' {
			pos = end + 1
			goto after
		}
	} else if blk+64 < len(b) {
		pos = blk + 64
		goto str
	}
	stop, v.resume = stopString, atAfter
	goto exit

refill: // The string at pos needs the masks of its block.
	// A whole block without special bytes, the common case, is done
	// here; blockMasks does the rest.
	blk = pos &^ 63
	if len(b)-blk >= 64 {
		p := (*[64]byte)(b[blk : blk+64])
		q0, a0 := wordMasks(binary.LittleEndian.Uint64(p[0:]))
		q1, a1 := wordMasks(binary.LittleEndian.Uint64(p[8:]))
		q2, a2 := wordMasks(binary.LittleEndian.Uint64(p[16:]))
		q3, a3 := wordMasks(binary.LittleEndian.Uint64(p[24:]))
		q4, a4 := wordMasks(binary.LittleEndian.Uint64(p[32:]))
		q5, a5 := wordMasks(binary.LittleEndian.Uint64(p[40:]))
		q6, a6 := wordMasks(binary.LittleEndian.Uint64(p[48:]))
		q7, a7 := wordMasks(binary.LittleEndian.Uint64(p[56:]))
		if (a0|a1|a2|a3|a4|a5|a6|a7)&highs == 0 {
			stops = q0 | q1<<8 | q2<<16 | q3<<24 | q4<<32 | q5<<40 | q6<<48 | q7<<56
			if inName {
				goto name
			}
			goto str
		}
	}
	v.blk = blk // for blockStops
	stop, v.resume = stopBlock, atString
	if inName {
		v.resume = atName
	}

exit:
	v.pos, v.depth, v.near, v.closer = pos, depth, near, closer
	v.blk, v.stops = blk, stops
	return stop
}

// blockStops marks, one bit a byte for the 64 bytes of b from blk, the
// bytes where a string ends or needs a closer look: quotes, backslashes,
// control characters and bytes of multibyte runes. Bytes past the end of
// b are marked too.
func blockStops(b []byte, blk int) uint64 {
	var p *[64]byte
	var pad [64]byte // zeros: control characters
	if len(b)-blk >= 64 {
		p = (*[64]byte)(b[blk : blk+64])
	} else {
		copy(pad[:], b[blk:])
		p = &pad
	}
	var stops uint64
	for k := 0; k < 64; k += 8 {
		w := binary.LittleEndian.Uint64(p[k:])
		stops |= byteMask(zeroBytes(w^'"'*lows)|specialBytes(w)) << k
	}
	return stops
}

// wordMasks returns the quotes among the 8 bytes of w, one bit a byte,
// and a word whose high bits are all clear when none of them is special.
func wordMasks(w uint64) (quotes, any uint64) {
	e := w ^ '\\'*lows
	return byteMask(zeroBytes(w ^ '"'*lows)), (e-lows)&^e | (w - ' '*lows) | w
}

// zeroBytes sets the high bit of each byte of w that is zero, and no other.
func zeroBytes(w uint64) uint64 {
	return ^((w&lows7 + lows7) | w) & highs
}

// specialBytes sets the high bit of each byte of w that does not stand for
// itself in a string (see stringSpecial), and no other.
func specialBytes(w uint64) uint64 {
	ctl := w&lows7 + (0x80-' ')*lows // high bit set: not a control character
	e := w ^ '\\'*lows
	bs := e&lows7 + lows7 | e // high bit set: not a backslash
	return (w | ^(ctl & bs)) & highs
}

// byteMask gathers the high bits of the bytes of w into the low 8 bits.
func byteMask(w uint64) uint64 {
	return w * 0x0002040810204081 >> 56
}
