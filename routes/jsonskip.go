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
// numbers, every 63 levels of nesting, the stops of the last, partial
// 64-byte block), which skipValue does before running it again. No body
// can make either recurse. A value that is not an object or an array is
// read here, so that run only ever ends a value inside a container.
func (s *scanner) skipValue(pos, depth int) int {
	if pos >= len(s.b) {
		return -1
	}
	if c := s.b[pos]; c != '{' && c != '[' {
		return scanScalar(s.b, pos)
	}
	v := skipper{b: s.b, pos: pos, limit: maxDepth - depth, blk: s.blk, stops: s.stops}
	v.floor = nearFloor(v.limit)
	v.near = v.floor
	for {
		switch v.run() {
		case stopDone:
			s.blk, s.stops = v.blk, v.stops
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

// noBlock is a block start that no position is in: pos-noBlock, as run
// computes it in unsigned arithmetic, is at least 64.
const noBlock = -1 << 62

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
	blk, stops := uint(v.blk), v.stops
	var c byte
	var stop skipStop
	var off uint
	ret := atName // where refill goes back to

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
		v.blk, v.stops = int(blk), stops
		if v.spilled == 0 {
			return stopDone
		}
		v.resume = atAfter
		return stopPop
	}
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
	// As for objStr below.
	if off = pos - blk; off >= 64 {
		ret = atName
		goto refill
	}
	if q := stops >> off; q != 0 {
		// The bytes up to the mark are plain: a step taken past them
		// leaves pos where scanString may go on.
		pos += uint(bits.TrailingZeros64(q))
		if pos+1 < uint(len(b)) && uint16(b[pos])|uint16(b[pos+1])<<8 == '"'|':'<<8 {
			pos += 2
			goto objValue
		}
		if pos < uint(len(b)) && b[pos] == '"' {
			pos++
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
	// The stops of the block holding pos give the string's end without a
	// load that waits for pos: the first one, when it is a quote.
	if off = pos - blk; off >= 64 {
		ret = atObjStr
		goto refill
	}
	if q := stops >> off; q != 0 {
		pos += uint(bits.TrailingZeros64(q))
		// Most often the next member's name follows at once.
		if pos+2 < uint(len(b)) && uint32(b[pos])|uint32(b[pos+1])<<8|uint32(b[pos+2])<<16 == '"'|','<<8|'"'<<16 {
			pos += 3
			goto name
		}
		if pos < uint(len(b)) && b[pos] == '"' {
			pos++
			goto objAfter
		}
	} else if blk+64 < uint(len(b)) {
		pos = blk + 64
		goto objStr
	}
	stop, v.resume = stopString, atAfter
	goto exit

arrStr: // The rest of an element's string value starts at pos.
	if off = pos - blk; off >= 64 {
		ret = atArrStr
		goto refill
	}
	if q := stops >> off; q != 0 {
		if pos += uint(bits.TrailingZeros64(q)); pos < uint(len(b)) && b[pos] == '"' {
			pos++
			goto arrAfter
		}
	} else if blk+64 < uint(len(b)) {
		pos = blk + 64
		goto arrStr
	}
	stop, v.resume = stopString, atAfter
	goto exit

refill: // The string at pos needs the stops of its block; ret goes on.
	blk = pos &^ 63
	if uint(len(b))-blk < 64 {
		v.blk = int(blk) // lastBlockStops pads the last block
		stop, v.resume = stopBlock, ret
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
	switch ret {
	case atObjStr:
		goto objStr
	case atArrStr:
		goto arrStr
	}
	goto name

exit:
	v.pos, v.near = int(pos), near
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
