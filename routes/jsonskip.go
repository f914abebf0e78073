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
// numbers, nesting from 64 levels on, the stops of the last, partial
// 64-byte block), which skipValue does before running it again. No body can make either
// recurse. A value that is not an object or an array is read here, so
// that run only ever ends a value inside a container.
func (s *scanner) skipValue(pos, depth int) int {
	if pos >= len(s.b) {
		return -1
	}
	if c := s.b[pos]; c != '{' && c != '[' {
		return scanScalar(s.b, pos)
	}
	v := skipper{b: s.b, pos: pos, limit: maxDepth - depth, blk: noBlock, resume: atValue}
	for {
		switch v.run() {
		case stopDone:
			return v.pos
		case stopInvalid:
			return -1
		case stopBlock:
			v.stops = lastBlockStops(v.b, v.blk)
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
	stopBlock             // the stops of the last block, at blk, which b ends in
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

// noBlock is a block start that no position is in: pos-noBlock, as run
// computes it in unsigned arithmetic, is at least 64.
const noBlock = -1 << 62

// run scans until it is done or needs a step it leaves to skipValue.
// Positions are unsigned here, so that a comparison with len(b) is all
// the compiler needs to see that an index is in range.
func (v *skipper) run() skipStop {
	b, pos, depth := v.b, uint(v.pos), v.depth
	near, closer := v.near, v.closer
	blk, stops := uint(v.blk), v.stops
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
	if pos >= uint(len(b)) {
		return stopInvalid
	}
	c = b[pos]
valueByte: // A value starts at pos, where c is.
	switch {
	case c-'0' <= 9:
		lead := c
		if pos++; pos >= uint(len(b)) {
			goto after
		}
		c = b[pos]
		if lead != '0' {
			for c-'0' <= 9 {
				if pos++; pos >= uint(len(b)) {
					goto after
				}
				c = b[pos]
			}
		}
		if c == ',' {
			pos++
			if closer == '}' {
				if pos < uint(len(b)) && b[pos] == '"' {
					pos++
					goto name
				}
				goto member
			}
			goto value
		}
		if c == closer {
			goto afterByte
		}
		if c == '.' || c|0x20 == 'e' {
			stop, v.resume = stopFraction, atAfter
			goto exit
		}
		goto afterByte
	case c == '"':
		pos++
		goto str
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
		goto value
	default:
		stop, v.resume = stopNumber, atAfter
		goto exit
	}

after: // A value inside the container at depth ends at pos.
	if pos >= uint(len(b)) {
		return stopInvalid
	}
	c = b[pos]
afterByte: // A value inside the container at depth ends at pos, where c is.
	switch c {
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
		pos = uint(skipSpaceLoop(b, int(pos)))
		goto after
	}
	return stopInvalid

opened: // The container at depth opened just before pos.
	if closer == '}' && pos < uint(len(b)) && b[pos] == '"' {
		pos++
		goto name
	}
	if pos < uint(len(b)) && b[pos] <= ' ' {
		pos = uint(skipSpaceLoop(b, int(pos)))
	}
	if pos < uint(len(b)) && b[pos] == closer {
		pos++
		goto closed
	}
	if closer == '}' {
		goto member
	}
	goto value

closed: // The container at depth closed just before pos.
	// near holds the depths below 64 only.
	if depth >= 64 {
		if depth--; depth >= 64 {
			stop, v.resume = stopPop, atAfter
			goto exit
		}
		goto nearCloser
	}
	near >>= 1
	if depth--; depth == 0 {
		v.pos = int(pos)
		return stopDone
	}
nearCloser: // The innermost container open, at depth, is below 64.
	closer = ']' | byte(near&1)<<5 // ']'|0x20 is '}'
	goto after

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
	// As for str below.
	if off = pos - blk; off >= 64 {
		inName = true
		goto refill
	}
	if q := stops >> off; q != 0 {
		if end := pos + uint(bits.TrailingZeros64(q)); end < uint(len(b)) && b[end] == '"' {
			if pos = end + 1; pos < uint(len(b)) && b[pos] == ':' {
				pos++
				goto value
			}
			goto nameEnd
		}
	} else if blk+64 < uint(len(b)) {
		pos = blk + 64
		goto name
	}
	stop, v.resume = stopString, atNameEnd
	goto exit

nameEnd: // A member name ends at pos.
	if pos < uint(len(b)) && b[pos] == ':' {
		pos++
		if pos < uint(len(b)) {
			if c = b[pos]; c > ' ' {
				goto valueByte
			}
		}
		goto value
	}
	if pos = uint(skipSpace(b, int(pos))); pos >= uint(len(b)) || b[pos] != ':' {
		return stopInvalid
	}
	pos++
	goto value

str: // The rest of a string value starts at pos.
	// The stops of the block holding pos give the string's end without a
	// load that waits for pos: the first one, when it is a quote.
	if off = pos - blk; off >= 64 {
		inName = false
		goto refill
	}
	if q := stops >> off; q != 0 {
		if end := pos + uint(bits.TrailingZeros64(q)); end < uint(len(b)) && b[end] == '"' {
			pos = end + 1
			goto after
		}
	} else if blk+64 < uint(len(b)) {
		pos = blk + 64
		goto str
	}
	stop, v.resume = stopString, atAfter
	goto exit

refill: // The string at pos needs the stops of its block.
	blk = pos &^ 63
	if uint(len(b))-blk < 64 {
		v.blk = int(blk) // lastBlockStops pads the last block
		stop, v.resume = stopBlock, atString
		if inName {
			v.resume = atName
		}
		goto exit
	}
	{
		// blockStops, by hand: a call here would have every register
		// saved around it.
		p := (*[64]byte)(b[blk : blk+64])
		stops = byteMask(stringSpecial(binary.LittleEndian.Uint64(p[0:]))&highs) |
			byteMask(stringSpecial(binary.LittleEndian.Uint64(p[8:]))&highs)<<8 |
			byteMask(stringSpecial(binary.LittleEndian.Uint64(p[16:]))&highs)<<16 |
			byteMask(stringSpecial(binary.LittleEndian.Uint64(p[24:]))&highs)<<24 |
			byteMask(stringSpecial(binary.LittleEndian.Uint64(p[32:]))&highs)<<32 |
			byteMask(stringSpecial(binary.LittleEndian.Uint64(p[40:]))&highs)<<40 |
			byteMask(stringSpecial(binary.LittleEndian.Uint64(p[48:]))&highs)<<48 |
			byteMask(stringSpecial(binary.LittleEndian.Uint64(p[56:]))&highs)<<56
	}
	if inName {
		goto name
	}
	goto str

exit:
	v.pos, v.depth, v.near, v.closer = int(pos), depth, near, closer
	v.blk, v.stops = int(blk), stops
	return stop
}

// blockStops marks, one bit a byte for the 64 bytes of p, where a string
// may end or needs a closer look: quotes, backslashes, control characters
// and bytes of multibyte runes, each marked. As stringSpecial may, it also
// marks some bytes above a marked one in the same 8, so a string takes a
// mark for its end only when the byte there is a quote.
func blockStops(p *[64]byte) uint64 {
	return byteMask(stringSpecial(binary.LittleEndian.Uint64(p[0:]))&highs) |
		byteMask(stringSpecial(binary.LittleEndian.Uint64(p[8:]))&highs)<<8 |
		byteMask(stringSpecial(binary.LittleEndian.Uint64(p[16:]))&highs)<<16 |
		byteMask(stringSpecial(binary.LittleEndian.Uint64(p[24:]))&highs)<<24 |
		byteMask(stringSpecial(binary.LittleEndian.Uint64(p[32:]))&highs)<<32 |
		byteMask(stringSpecial(binary.LittleEndian.Uint64(p[40:]))&highs)<<40 |
		byteMask(stringSpecial(binary.LittleEndian.Uint64(p[48:]))&highs)<<48 |
		byteMask(stringSpecial(binary.LittleEndian.Uint64(p[56:]))&highs)<<56
}

// lastBlockStops is blockStops for a block that b ends in, its bytes past
// the end marked.
func lastBlockStops(b []byte, blk int) uint64 {
	var pad [64]byte // zeros: control characters
	copy(pad[:], b[blk:])
	return blockStops(&pad)
}

// byteMask gathers the high bits of the bytes of w into the low 8 bits.
func byteMask(w uint64) uint64 {
	return w * 0x0002040810204081 >> 56
}
