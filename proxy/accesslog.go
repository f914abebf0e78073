package proxy

import (
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/plainbytes"
)

// accessLine is what one access log line records.
type accessLine struct {
	at       time.Time
	route    string
	status   int
	duration time.Duration
}

var lineBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// logAccess writes the access line of a finished request. With an
// AccessLog writer the line is encoded here, the same JSON the slog
// handler writes (same keys, order and escaping), with no allocation;
// otherwise it goes through the logger.
func (g *Gateway) logAccess(r *http.Request, ex *exchange, l accessLine) {
	if g.access == nil {
		g.logAccessSlog(r, ex, l)
		return
	}
	if !g.log.Enabled(r.Context(), slog.LevelInfo) {
		return
	}
	bp := lineBuffers.Get().(*[]byte)
	b := (*bp)[:0]
	b = append(b, `{"time":"`...)
	b = appendTime(b, l.at)
	b = append(b, `","level":"INFO","msg":"request","request_id":`...)
	b = appendLogString(b, ex.id)
	b = append(b, `,"route":`...)
	b = appendLogString(b, l.route)
	b = append(b, `,"method":`...)
	b = appendLogString(b, r.Method)
	b = append(b, `,"path":`...)
	b = appendLogValue(b, r.URL.Path)
	if r.URL.RawPath != "" {
		// Escapes the decoded path loses (%2F, %3B) tell keys apart.
		b = append(b, `,"raw_path":`...)
		b = appendLogValue(b, r.URL.RawPath)
	}
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(l.status), 10)
	b = append(b, `,"duration_ms":`...)
	b = appendMillis(b, l.duration)
	b = append(b, `,"client_ip":`...)
	switch {
	case ex.client.IsValid() && ex.client.Zone() == "":
		b = append(b, '"')
		b = ex.client.AppendTo(b) // an address without a zone needs no escaping
		b = append(b, '"')
	default:
		// A zone may hold any bytes; sluice resolves no client with
		// one, but the line stays JSON whatever it is given.
		b = appendLogString(b, ex.client.String()) // "invalid IP" as netip says it
	}
	if ex.upstream != "" {
		b = append(b, `,"upstream":`...)
		b = appendLogString(b, ex.upstream)
	}
	if ex.rejectedBy != "" {
		b = append(b, `,"rejected_by":`...)
		b = appendLogString(b, ex.rejectedBy)
	}
	if ex.waited > 0 {
		b = append(b, `,"queue_wait_ms":`...)
		b = appendMillis(b, ex.waited)
	}
	if ex.upstreamErr != nil {
		b = append(b, `,"upstream_error":`...)
		b = appendLogString(b, ex.upstreamErr.Error())
	}
	if ex.bodyErr != nil {
		b = append(b, `,"body_error":`...)
		b = appendLogString(b, ex.bodyErr.Error())
	}
	if ex.keys != nil {
		b = append(b, `,"keys":[`...)
		for i, k := range ex.keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendLogValue(b, k)
		}
		b = append(b, ']')
	}
	b = append(b, "}\n"...)
	g.access.Write(b)
	*bp = b
	lineBuffers.Put(bp)
}

// logAccessSlog writes the access line through the logger.
func (g *Gateway) logAccessSlog(r *http.Request, ex *exchange, l accessLine) {
	if !g.log.Enabled(r.Context(), slog.LevelInfo) {
		return
	}
	attrs := []slog.Attr{
		slog.String("request_id", ex.id),
		slog.String("route", l.route),
		slog.String("method", r.Method),
		slog.String("path", logValue(r.URL.Path)),
	}
	if r.URL.RawPath != "" {
		attrs = append(attrs, slog.String("raw_path", logValue(r.URL.RawPath)))
	}
	attrs = append(attrs,
		slog.Int("status", l.status),
		slog.Float64("duration_ms", float64(l.duration.Microseconds())/1000),
		slog.String("client_ip", ex.client.String()),
	)
	if ex.upstream != "" {
		attrs = append(attrs, slog.String("upstream", ex.upstream))
	}
	if ex.rejectedBy != "" {
		attrs = append(attrs, slog.String("rejected_by", ex.rejectedBy))
	}
	if ex.waited > 0 {
		attrs = append(attrs, slog.Float64("queue_wait_ms", float64(ex.waited.Microseconds())/1000))
	}
	if ex.upstreamErr != nil {
		attrs = append(attrs, slog.String("upstream_error", ex.upstreamErr.Error()))
	}
	if ex.bodyErr != nil {
		attrs = append(attrs, slog.String("body_error", ex.bodyErr.Error()))
	}
	if ex.keys != nil {
		keys := ex.keys
		for i, k := range ex.keys {
			if v := logValue(k); v != k {
				if &keys[0] == &ex.keys[0] {
					keys = slices.Clone(ex.keys)
				}
				keys[i] = v
			}
		}
		attrs = append(attrs, slog.Any("keys", keys))
	}
	rec := slog.NewRecord(l.at, slog.LevelInfo, "request", 0)
	rec.AddAttrs(attrs...)
	g.log.Handler().Handle(r.Context(), rec)
}

// appendMillis appends d in milliseconds with microsecond precision, as
// encoding/json writes float64(d.Microseconds())/1000.
func appendMillis(b []byte, d time.Duration) []byte {
	us := d.Microseconds()
	if us < 0 || us >= 1<<33 {
		// Up to 2^33 µs (about 2.4 hours) the float is within a millionth of
		// the decimal, whose digits are then its shortest form; beyond
		// that, or below zero, strconv decides.
		return strconv.AppendFloat(b, float64(us)/1000, 'f', -1, 64)
	}
	b = strconv.AppendInt(b, us/1000, 10)
	if frac := us % 1000; frac != 0 {
		// Three decimals without their trailing zeros.
		f := [4]byte{'.', byte('0' + frac/100), twoDigits[2*(frac%100)], twoDigits[2*(frac%100)+1]}
		n := 4
		for f[n-1] == '0' {
			n--
		}
		b = append(b, f[:n]...)
	}
	return b
}

// appendTime appends t as t.AppendFormat(b, time.RFC3339Nano) does, in
// about a third of its instructions: AppendFormat writes each number
// through a general padding routine.
func appendTime(b []byte, t time.Time) []byte {
	_, offset := t.Zone()
	zone := offset / 60 // in minutes, as RFC 3339 has it
	local := t.UTC().Add(time.Duration(offset) * time.Second)
	year, month, day := local.Date()
	if year < 0 || year > 9999 || zone <= -100*60 || zone >= 100*60 {
		return t.AppendFormat(b, time.RFC3339Nano) // more digits than below
	}
	hour, minute, sec := local.Clock()
	b = append2(b, year/100)
	b = append2(b, year%100)
	b = append(b, '-')
	b = append2(b, int(month))
	b = append(b, '-')
	b = append2(b, day)
	b = append(b, 'T')
	b = append2(b, hour)
	b = append(b, ':')
	b = append2(b, minute)
	b = append(b, ':')
	b = append2(b, sec)
	if ns := t.Nanosecond(); ns != 0 {
		// Nine digits without their trailing zeros.
		var frac [10]byte
		frac[0] = '.'
		for i := 8; i > 1; i -= 2 {
			d := ns % 100
			frac[i], frac[i+1] = twoDigits[2*d], twoDigits[2*d+1]
			ns /= 100
		}
		frac[1] = byte('0' + ns)
		n := 10
		for frac[n-1] == '0' {
			n--
		}
		b = append(b, frac[:n]...)
	}
	if offset == 0 {
		return append(b, 'Z')
	}
	if zone < 0 {
		b = append(b, '-')
		zone = -zone
	} else {
		b = append(b, '+')
	}
	b = append2(b, zone/60)
	b = append(b, ':')
	return append2(b, zone%60)
}

// append2 appends n, from 0 to 99, in two digits.
func append2(b []byte, n int) []byte {
	return append(b, twoDigits[2*n], twoDigits[2*n+1])
}

// twoDigits holds "00" to "99" one after the other.
var twoDigits = func() (t [200]byte) {
	for n := range 100 {
		t[2*n], t[2*n+1] = byte('0'+n/10), byte('0'+n%10)
	}
	return t
}()

const hexDigits = "0123456789abcdef"

// escapedMark opens a logged value (a path or a key) that is written
// with escapes: its bytes that are not UTF-8, and its '%', as %XX. JSON
// strings hold only UTF-8, and slog would write each such byte as
// \ufffd, which would make distinct keys one. A value that starts with
// the mark is escaped too, so that every logged value reads back as it
// was (simulate decodes it).
const escapedMark = "%!"

// needsEscapes reports whether v is logged with escapedMark.
func needsEscapes(v string) bool {
	return !utf8.ValidString(v) || strings.HasPrefix(v, escapedMark)
}

// appendLogValue appends a path or a key value as a JSON string, with
// escapedMark and its escapes when it needs them (which allocates).
func appendLogValue(b []byte, v string) []byte {
	return appendLogString(b, logValue(v))
}

// logValue returns v as it is logged: itself, or escapedMark and v with
// its '%' and the bytes that are not UTF-8 written %XX.
func logValue(v string) string {
	if !needsEscapes(v) {
		return v
	}
	e := make([]byte, 0, len(escapedMark)+len(v)+8)
	e = append(e, escapedMark...)
	for i := 0; i < len(v); {
		r, size := utf8.DecodeRuneInString(v[i:])
		if v[i] == '%' || r == utf8.RuneError && size == 1 {
			e = append(e, '%', hexDigits[v[i]>>4], hexDigits[v[i]&0xf])
			i++
			continue
		}
		e = append(e, v[i:i+size]...)
		i += size
	}
	return string(e)
}

// appendLogString appends s as a JSON string escaped the way slog's JSON
// handler escapes it: \" \\ \n \r \t, other control characters as
// \u00XX, invalid UTF-8 as \ufffd, U+2028 and U+2029 escaped.
func appendLogString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		i += plainbytes.JSON(s[i:])
		for i < len(s) && logSafe[s[i]] {
			i++
		}
		if i == len(s) {
			break
		}
		if c := s[i]; c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// logSafe[c] tells whether slog's JSON handler writes byte c of a string
// as it is: printable ASCII other than the quote and the backslash. Bytes
// from 0x80 up are not safe here, so appendLogString looks at the rune
// they start.
var logSafe = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()
