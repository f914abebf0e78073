package proxy

import (
	"bufio"
	"bytes"
	"net/http"
	"net/textproto"
	"strings"
)

// framingInDoubt reports whether the answer head at the start of br frames
// its body in a way another reader could take differently, so that what
// the upstream meant for the body may be left on the connection (RFC 9112
// §6.1, §6.3): Content-Length beside Transfer-Encoding, where
// http.ReadResponse goes by Transfer-Encoding and drops the other, or
// Transfer-Encoding in an HTTP/1.0 answer, which it ignores, or a 204
// that announces a body (Transfer-Encoding, or a Content-Length other
// than 0), which RFC 9110 §8.6 and RFC 9112 §6.1 forbid and which
// http.ReadResponse reads as bodiless, leaving the body it announced to
// be read as the next answer. RFC 9112 has the connection closed after
// the first two, and nothing but a close makes the third safe; http.ReadResponse
// leaves no trace of the field it set aside, so the head is read here
// first, in br's buffer. A head longer than the buffer cannot be, and is
// in doubt too. Errors are left to http.ReadResponse, which meets them
// again. s, which must be zero, is left with what the scan found.
func framingInDoubt(br *bufio.Reader, s *headScan) bool {
	for {
		buf, _ := br.Peek(br.Buffered())
		if doubt, whole := s.scan(buf); whole {
			return doubt
		}
		if len(buf) == br.Size() {
			return true
		}
		// A head that comes a byte at a time is read once all the same:
		// each scan goes on from the last line it ended.
		if _, err := br.Peek(len(buf) + 1); err != nil {
			return false
		}
	}
}

// headScan reads a message head as it arrives, and tells whether its
// framing is in doubt (see framingInDoubt). It reads lines as
// http.ReadResponse does, ended by LF alone or CRLF. The zero value is
// ready to read a head.
type headScan struct {
	n              int  // bytes of the head read so far: whole lines
	length, coding bool // Content-Length, Transfer-Encoding seen
	someLength     bool // a Content-Length other than 0 seen
	noContent      bool // the status is 204

	// hop holds the values of the Connection fields, when one of them
	// says close: http.ReadResponse then drops them all, and with them
	// the names of the other fields that are for this hop only, which
	// ReverseProxy would have removed (see dropHopFields).
	hop      []string
	hopClose bool
	// conn is where the value of the last Connection field begins in the
	// head, while lines folded onto it (obs-fold, which http.ReadResponse
	// joins to the value) may still come; 0 when none is pending.
	conn int
}

// scan goes on reading the head at the start of b, which holds at least
// what the last scan was given, and reports whether its framing is in
// doubt, and whether b holds the whole head.
func (s *headScan) scan(b []byte) (doubt, whole bool) {
	for {
		i := bytes.IndexByte(b[s.n:], '\n')
		if i < 0 {
			return false, false
		}
		start := s.n
		line := b[start : start+i]
		status := start == 0
		s.n += i + 1
		if n := len(line); n > 0 && line[n-1] == '\r' {
			line = line[:n-1]
		}
		if status {
			// The status code is the three bytes after the first
			// space, as http.ReadResponse reads it.
			if i := bytes.IndexByte(line, ' '); i >= 0 {
				code := line[i+1:]
				s.noContent = bytes.HasPrefix(code, []byte("204")) && (len(code) == 3 || code[3] == ' ')
			}
			continue
		}
		if s.conn > 0 && (len(line) == 0 || line[0] != ' ' && line[0] != '\t') {
			// The Connection value ends here, with the lines folded
			// onto it: read as http.ReadResponse reads it.
			s.connection(b[s.conn:start])
			s.conn = 0
		}
		if len(line) == 0 {
			// Transfer-Encoding counts only from HTTP/1.1 on.
			old := len(b) >= 8 && string(b[:5]) == "HTTP/" && (b[5] == '0' || b[5] == '1' && b[7] == '0')
			return s.coding && (s.length || old) || s.noContent && (s.coding || s.someLength), true
		}
		colon := bytes.IndexByte(line, ':')
		if colon < 0 {
			continue
		}
		name := bytes.TrimRight(line[:colon], " \t")
		switch {
		case equalFoldASCII(name, "content-length"):
			s.length = true
			s.someLength = s.someLength || string(bytes.Trim(line[colon+1:], " \t")) != "0"
		case equalFoldASCII(name, "transfer-encoding"):
			s.coding = true
		case equalFoldASCII(name, "connection"):
			s.conn = start + colon + 1
		}
	}
}

// connection notes a Connection field's value v. Only a value that names
// a field is kept (a copy), so the usual "keep-alive" or "close" costs no
// allocation.
func (s *headScan) connection(v []byte) {
	names := false
	for t := range bytes.SplitSeq(v, []byte(",")) {
		switch t = bytes.TrimSpace(t); {
		case equalFoldASCII(t, "close"):
			s.hopClose = true
		case len(t) > 0 && !equalFoldASCII(t, "keep-alive"):
			names = true
		}
	}
	if names {
		s.hop = append(s.hop, string(v))
	}
}

// dropHopFields removes from h the fields that the Connection fields
// of the head s read name, when http.ReadResponse has dropped those
// Connection fields for saying close (RFC 9110 §7.6.1: a field named in
// Connection is for this hop only). Where no Connection field says close,
// ReverseProxy removes them itself.
func (s *headScan) dropHopFields(h http.Header) {
	if !s.hopClose {
		return
	}
	for _, v := range s.hop {
		for name := range strings.SplitSeq(v, ",") {
			if name = textproto.TrimString(name); name != "" {
				h.Del(name)
			}
		}
	}
}

// equalFoldASCII reports whether b is s, a lower-case name, in any ASCII
// letter case.
func equalFoldASCII(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}
