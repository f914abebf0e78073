package routes

import (
	"bytes"
	"fmt"
	"math"
	"mime"
	"strconv"
	"strings"
)

// MaxKeyBody is the largest request body in bytes that json: key sources
// look into; the gateway reads no more than this before deciding. A larger
// body gives those sources an empty value.
const MaxKeyBody = 64 << 10

// Body is a request body read for json: key sources. Each source walks it
// once with a scanner that validates every byte and decodes nothing but
// the names and the value on its path. Create it with NewBody; it is
// immutable and safe for concurrent use.
type Body struct {
	raw []byte
}

// NewBody wraps raw, which the caller must not modify afterwards. A body
// larger than MaxKeyBody, or not a single JSON value, yields empty values.
func NewBody(raw []byte) *Body { return &Body{raw: raw} }

// JSONCharsetProblem says why a body of the JSON Content-Type contentType
// may be decoded by an upstream as other than the UTF-8 that json:
// sources read, or "" when the type names no other charset. RFC 8259 has
// JSON exchanged as UTF-8, but Express's body-parser, Django REST
// framework and Werkzeug decode other charsets too:
// {"phone":"r1","+AHA-hone":"victim"} in UTF-7 is victim to them.
// (EncodingProblem looks at the body itself.)
func JSONCharsetProblem(contentType string) string {
	// Every charset parameter counts, however many there are (a
	// parser that reads the last of two would decode by it), and in a
	// value that mime.ParseMediaType refuses too.
	_, params, _ := strings.Cut(contentType, ";")
	for params != "" {
		var p string
		p, params, _ = strings.Cut(params, ";")
		k, cs, _ := strings.Cut(p, "=")
		k = strings.ToLower(strings.TrimSpace(k))
		if k != "charset" && !strings.HasPrefix(k, "charset*") {
			continue
		}
		// charset*, charset*0... are RFC 2231's forms (charset*=utf-8''utf-7),
		// which mime.ParseMediaType and Django read: their value is what
		// follows the language, after the second quote.
		cs = strings.Trim(strings.TrimSpace(cs), `"`)
		if k != "charset" {
			if i := strings.LastIndexByte(cs, '\''); i >= 0 {
				cs = cs[i+1:]
			}
		}
		if !strings.EqualFold(cs, "utf-8") && !strings.EqualFold(cs, "utf8") {
			return fmt.Sprintf("the JSON body's charset is %q; json: key sources read UTF-8, and so must the upstream", cs)
		}
	}
	return ""
}

// ContentEncodingProblem says why a JSON body sent with the
// Content-Encoding fields values may be read by an upstream as other than
// the bytes json: sources read, or "" when it is sent as it is (no field,
// or identity). json: sources read the body as sent; Express's
// body-parser inflates gzip, deflate and br bodies by default (and
// ASP.NET Core's request decompression does when enabled), and would read
// a phone sluice keys as the empty value, one bucket every compressed
// guess shares.
func ContentEncodingProblem(values []string) string {
	for _, v := range values {
		for v != "" {
			var c string
			c, v, _ = strings.Cut(v, ",")
			c = strings.TrimSpace(c)
			if c != "" && !strings.EqualFold(c, "identity") {
				return fmt.Sprintf("the JSON body's Content-Encoding is %q; json: key sources read the body as sent, and an upstream may decode it", c)
			}
		}
	}
	return ""
}

// EncodingProblem says why the body may be decoded by an upstream as
// other than UTF-8, whatever its Content-Type says, or "" when nothing
// suggests it: a byte order mark, or the NUL bytes that UTF-16 and UTF-32
// text of JSON starts with, which Express and Werkzeug detect and decode.
// A body too large for the keys to read is not looked at: its json: keys
// are empty anyway.
func (b *Body) EncodingProblem() string {
	head := b.raw[:min(len(b.raw), 4)]
	switch {
	case bytes.HasPrefix(head, []byte("\xef\xbb\xbf")), bytes.HasPrefix(head, []byte("\xfe\xff")), bytes.HasPrefix(head, []byte("\xff\xfe")):
		return "the JSON body starts with a byte order mark; json: key sources read UTF-8 without one"
	case bytes.IndexByte(head, 0) >= 0:
		return "the JSON body is not UTF-8 (it holds NUL bytes, as UTF-16 and UTF-32 do); json: key sources read UTF-8"
	}
	return ""
}

// MediaTypeProblem says why the Content-Type value contentType may name
// a JSON body to an upstream while json: sources read none, or "" when
// its media type (what comes before the first ";", blanks around it
// aside) holds no "," and no blank. Werkzeug (Flask) takes as the media
// type what comes before the first ";", "," or blank, so
// "application/json, text/plain" (a list, as two Content-Type fields
// joined make) and "application/json text/plain" are JSON to it, and
// another type to IsJSON: every guess would share the empty value.
// A JSON media type with a blank before its ";" is refused too: restify
// 11.1.0 takes as the media type all that comes before the ";", blank
// included, and reads no JSON in "application/json ; charset=utf-8",
// where json: sources would key a value per request that is, to it, one
// without a body.
func MediaTypeProblem(contentType string) string {
	t, _, params := strings.Cut(contentType, ";")
	t = strings.TrimLeft(t, " \t")
	trimmed := strings.TrimRight(t, " \t")
	if strings.ContainsAny(trimmed, ", \t") {
		return "Content-Type holds more than one media type; json: key sources need one"
	}
	if params && trimmed != t && IsJSON(contentType) {
		return "Content-Type has a blank before its parameters, which some frameworks read as part of a media type that is then not JSON; json: key sources need none"
	}
	return ""
}

// IsJSON reports whether a Content-Type value names a JSON body:
// application/json or application/*+json, parameters and letter case
// aside. Only such bodies are read by json: key sources; an upstream would
// parse any other as something else.
func IsJSON(contentType string) bool {
	t, _, _ := strings.Cut(contentType, ";")
	t = strings.TrimSpace(t)
	sub, ok := cutPrefixFold(t, "application/")
	if !ok {
		return false
	}
	if strings.EqualFold(sub, "json") {
		return true
	}
	if len(sub) <= len("+json") || !strings.EqualFold(sub[len(sub)-len("+json"):], "+json") {
		return false
	}
	// The rest must be a media subtype token, not "a/b+json" or spaces.
	_, _, err := mime.ParseMediaType(t)
	return err == nil
}

func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) < len(prefix) || !strings.EqualFold(s[:len(prefix)], prefix) {
		return s, false
	}
	return s[len(prefix):], true
}

// appendField appends the value at path: a string's unescaped text, a
// number in canonical form (so 1, 1.0 and 1e0 are one key), true or false.
// Objects, arrays, null, missing fields and bodies that are not one JSON
// value append nothing. A path element that is a whole number indexes an
// array. Member names match in any letter case, as lenient decoders match
// them; a name on the path given twice in one object is an error, since
// the upstream might pick either.
//
// The body is one JSON value by RFC 8259 or it gives nothing: strings are
// valid UTF-8, so invalid bytes in any string, on the path or not, and
// \u escapes of lone surrogates make the body invalid, as they do for the
// JSON decoders that reject what they cannot read back (Go's
// encoding/json/v2, jsontext). Objects and arrays nest at most 10,000
// deep, jsontext's bound. A duplicate is reported when the scan reaches
// the second name before any syntax error.
//
// dotted, when the path has more than one name, is the path as one name:
// a member of the top-level object so named is the field too, since
// lodash's _.get(body, "user.phone") and Laravel's Arr::get read it when
// the object has it, and only otherwise go down the path. Given beside the
// field it is a duplicate; alone, its value is the field's. Only a body
// with a '.' or an escape that may be one can hold it, so the second walk
// that looks for it is left out for the others.
func (b *Body) appendField(dst []byte, path, dotted [][]byte) ([]byte, bool) {
	if b == nil || len(b.raw) == 0 || len(b.raw) > MaxKeyBody {
		return dst, true
	}
	s := scanner{b: b.raw, path: path}
	v, st := s.walk()
	s.kinds.release()
	if st == scanValid && dotted != nil && mayHoldDot(b.raw) {
		d := scanner{b: b.raw, path: dotted}
		w, dotSt := d.walk()
		d.kinds.release()
		switch {
		case dotSt == scanDuplicate, w != nil && v != nil:
			return dst, false
		case w != nil:
			v = w
		}
	}
	switch st {
	case scanDuplicate:
		return dst, false
	case scanValid:
		return appendScalar(dst, v), true
	}
	return dst, true
}

// appendJSONCookie appends the key text of the JSON text s (as a json:
// source keys the value it reads) when s is what Express's cookie-parser
// puts in place of a "j:" cookie's value: one valid JSON value (with
// whitespace around it, as JSON.parse takes it) that is truthy in
// JavaScript. It reports whether it was.
func appendJSONCookie(dst, s []byte) ([]byte, bool) {
	if len(s) > MaxKeyBody {
		return dst, false
	}
	sc := scanner{b: s}
	v, st := sc.walk()
	sc.kinds.release()
	if st != scanValid || !truthy(v) {
		return dst, false
	}
	return appendScalar(dst, v), true
}

// truthy reports whether the valid JSON value v is truthy in JavaScript:
// not "", 0, false or null.
func truthy(v []byte) bool {
	switch v[0] {
	case '"':
		return len(v) > 2
	case 'f', 'n':
		return false
	case 't', '{', '[':
		return true
	}
	f, err := strconv.ParseFloat(string(v), 64)
	return err != nil || f != 0 // an overflow is ±Inf, truthy
}

// appendScalar appends the key text of the raw JSON value v, which the
// scan has validated.
func appendScalar(dst []byte, v []byte) []byte {
	if len(v) == 0 {
		return dst
	}
	switch v[0] {
	case '"':
		dst, _ = appendUnquoted(dst, v[1:len(v)-1], len(v))
		return dst
	case 't', 'f':
		return append(dst, v...)
	case 'n', '{', '[':
		return dst
	}
	return appendNumber(dst, v)
}

// appendNumber appends the canonical text of a JSON number: the shortest
// decimal that reads back as the same float64, without an exponent for
// magnitudes from 1e-7 to below 1e21 (as JavaScript prints numbers), and
// "0" for minus zero. Numbers an upstream would read as one float64 are
// one key, so a client cannot spell one number many ways.
func appendNumber(dst []byte, v []byte) []byte {
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil && !math.IsInf(f, 0) {
		return dst
	}
	switch a := math.Abs(f); {
	case f == 0:
		return append(dst, '0')
	case a >= 1e-7 && a < 1e21:
		return strconv.AppendFloat(dst, f, 'f', -1, 64)
	default:
		return strconv.AppendFloat(dst, f, 'e', -1, 64)
	}
}

// mayHoldDot reports whether the JSON text b may hold a '.' in a member
// name: as itself, or as an escape.
func mayHoldDot(b []byte) bool {
	return bytes.IndexByte(b, '.') >= 0 || bytes.IndexByte(b, '\\') >= 0
}
