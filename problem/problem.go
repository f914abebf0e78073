// Package problem writes RFC 9457 problem details (application/problem+json),
// the body of every error sluice answers itself.
package problem

import (
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/plainbytes"
)

// Details is a problem body. Type is "about:blank" unless set; Title
// defaults to the status text. Policy and RetryAfter are sluice's extension
// members for 429 answers and are left out when empty.
type Details struct {
	Type       string `json:"type"`
	Title      string `json:"title"`
	Status     int    `json:"status"`
	Detail     string `json:"detail,omitempty"`
	Instance   string `json:"instance,omitempty"`
	Policy     string `json:"policy,omitempty"`
	RetryAfter int64  `json:"retry_after,omitempty"`
}

// Header values every problem answer carries, shared so that writing one
// allocates no slice for them. Nobody may modify them.
var (
	contentType  = []string{"application/problem+json"}
	cacheControl = []string{"no-store"}
	nosniff      = []string{"nosniff"}
)

// lengths caches Content-Length values; problem bodies are short.
var lengths [2048]atomic.Pointer[[]string]

// contentLength returns n as a header value, shared between answers of the
// same length.
func contentLength(n int) []string {
	if n >= len(lengths) {
		return []string{strconv.Itoa(n)}
	}
	if v := lengths[n].Load(); v != nil {
		return *v
	}
	v := []string{strconv.Itoa(n)}
	lengths[n].Store(&v)
	return v
}

var bodies = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// Write sends p with its status. It sets Content-Type and Content-Length,
// tells caches not to keep the answer, and tells browsers not to sniff
// another type into it (a detail can quote what the client sent).
func Write(w http.ResponseWriter, p Details) {
	bp := bodies.Get().(*[]byte)
	body := append(Append((*bp)[:0], p), '\n')
	WriteBody(w, p.Status, body)
	*bp = body
	bodies.Put(bp)
}

// WriteBody sends body, a problem as Append writes it and a newline, with
// status and the fields Write sets. It is Write for a caller that built
// the body itself.
func WriteBody(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h["Content-Type"] = contentType
	h["Content-Length"] = contentLength(len(body))
	h["Cache-Control"] = cacheControl
	h["X-Content-Type-Options"] = nosniff
	delete(h, "Content-Encoding")
	w.WriteHeader(status)
	w.Write(body)
}

// Error writes a problem of the given status with a human-readable detail.
func Error(w http.ResponseWriter, status int, detail string) {
	Write(w, Details{Status: status, Detail: detail})
}

// Append appends p as JSON to dst, with the defaults Write applies, exactly
// as encoding/json marshals Details (members in field order, HTML
// characters escaped).
func Append(dst []byte, p Details) []byte {
	if p.Type == "" {
		p.Type = "about:blank"
	}
	if p.Title == "" {
		p.Title = http.StatusText(p.Status)
	}
	dst = append(dst, `{"type":`...)
	dst = AppendString(dst, p.Type)
	dst = append(dst, `,"title":`...)
	dst = AppendString(dst, p.Title)
	dst = append(dst, `,"status":`...)
	dst = strconv.AppendInt(dst, int64(p.Status), 10)
	if p.Detail != "" {
		dst = append(dst, `,"detail":`...)
		dst = AppendString(dst, p.Detail)
	}
	if p.Instance != "" {
		dst = append(dst, `,"instance":`...)
		dst = AppendString(dst, p.Instance)
	}
	if p.Policy != "" {
		dst = append(dst, `,"policy":`...)
		dst = AppendString(dst, p.Policy)
	}
	if p.RetryAfter != 0 {
		dst = append(dst, `,"retry_after":`...)
		dst = strconv.AppendInt(dst, p.RetryAfter, 10)
	}
	return append(dst, '}')
}

const hex = "0123456789abcdef"

// AppendString appends s as a JSON string the way encoding/json writes it:
// control characters and <, >, & as \u00XX (but \b \f \n \r \t by their
// short forms), invalid UTF-8 as \ufffd, U+2028 and U+2029 escaped.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		i += plainbytes.JSONHTML(s[i:])
		for i < len(s) && htmlSafe[s[i]] {
			i++
		}
		if i == len(s) {
			break
		}
		if c := s[i]; c < utf8.RuneSelf {
			dst = append(dst, s[start:i]...)
			switch c {
			case '\\', '"':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// htmlSafe[c] tells whether encoding/json writes byte c of a string as it
// is: printable ASCII other than the quote, the backslash and <, >, &.
// Bytes from 0x80 up are not safe here, so AppendString looks at the
// rune they start. A table lookup per byte keeps the common case, a
// string with nothing to escape, to one load and one test a byte.
var htmlSafe = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()
