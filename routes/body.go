package routes

import (
	"bytes"
	"io"
	"math"
	"mime"
	"strconv"
	"strings"
	"sync"

	"github.com/go-json-experiment/json/jsontext"
)

// MaxKeyBody is the largest request body in bytes that json: key sources
// look into; the gateway reads no more than this before deciding. A larger
// body gives those sources an empty value.
const MaxKeyBody = 64 << 10

// Body is a request body read for json: key sources. Each source streams
// over it with a tokenizer, so nothing is decoded but the fields on its
// path. Create it with NewBody; it is immutable and safe for concurrent
// use.
type Body struct {
	raw []byte
}

// NewBody wraps raw, which the caller must not modify afterwards. A body
// larger than MaxKeyBody, or not a single JSON value, yields empty values.
func NewBody(raw []byte) *Body { return &Body{raw: raw} }

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

// scanner is one walk of a body along a json: path; pooled, since a
// jsontext.Decoder is large.
type scanner struct {
	dec  jsontext.Decoder
	in   bytes.Buffer
	name []byte // an unescaped member name
	path [][]byte
	// found is the raw value at the path, nil when absent; dup reports a
	// name on the path that occurs twice in one object, in any letter case.
	found []byte
	dup   bool
}

var scanners = sync.Pool{New: func() any { return new(scanner) }}

// Duplicate names are found by the scan itself, in any letter case: the
// decoder's own exact-name check would cost a map per object.
var decodeOptions = []jsontext.Options{jsontext.AllowDuplicateNames(true)}

// appendField appends the value at path: a string's unescaped text, a
// number in canonical form (so 1, 1.0 and 1e0 are one key), true or false.
// Objects, arrays, null, missing fields and bodies that are not one JSON
// value append nothing. A path element that is a whole number indexes an
// array. Member names match in any letter case, as lenient decoders match
// them; a name on the path given twice in one object is an error, since
// the upstream might pick either.
func (b *Body) appendField(dst []byte, path [][]byte) ([]byte, bool) {
	if b == nil || len(b.raw) == 0 || len(b.raw) > MaxKeyBody {
		return dst, true
	}
	s := scanners.Get().(*scanner)
	defer scanners.Put(s)
	s.in = *bytes.NewBuffer(b.raw)
	s.dec.Reset(&s.in, decodeOptions...)
	s.path, s.found, s.dup = path, nil, false
	defer func() { s.path, s.found, s.in = nil, nil, bytes.Buffer{} }()
	err := s.value(0)
	if s.dup {
		return dst, false
	}
	if err != nil {
		return dst, true
	}
	if _, err := s.dec.ReadToken(); err != io.EOF {
		return dst, true // trailing data: not one JSON value
	}
	return appendScalar(dst, s.found), true
}

// value consumes one JSON value whose path so far is s.path[:depth].
func (s *scanner) value(depth int) error {
	if depth == len(s.path) {
		v, err := s.dec.ReadValue()
		if err != nil {
			return err
		}
		s.found = v
		return nil
	}
	switch s.dec.PeekKind() {
	case '{':
		if _, err := s.dec.ReadToken(); err != nil {
			return err
		}
		seen := false
		for s.dec.PeekKind() == '"' {
			name, err := s.dec.ReadValue()
			if err != nil {
				return err
			}
			if !s.matches(name, s.path[depth]) {
				if err := s.dec.SkipValue(); err != nil {
					return err
				}
				continue
			}
			if seen {
				s.dup = true
				return errDuplicate
			}
			seen = true
			if err := s.value(depth + 1); err != nil {
				return err
			}
		}
		_, err := s.dec.ReadToken()
		return err
	case '[':
		if _, err := s.dec.ReadToken(); err != nil {
			return err
		}
		want := -1
		if i, err := strconv.Atoi(string(s.path[depth])); err == nil && i >= 0 {
			want = i
		}
		for i := 0; s.dec.PeekKind() != ']' && s.dec.PeekKind() != 0; i++ {
			var err error
			if i == want {
				err = s.value(depth + 1)
			} else {
				err = s.dec.SkipValue()
			}
			if err != nil {
				return err
			}
		}
		_, err := s.dec.ReadToken()
		return err
	default:
		return s.dec.SkipValue()
	}
}

// matches reports whether the quoted member name equals want in any
// letter case, Unicode simple folding included (as encoding/json matches
// "K", the Kelvin sign, to "k").
func (s *scanner) matches(quoted []byte, want []byte) bool {
	name := quoted[1 : len(quoted)-1]
	if bytes.IndexByte(name, '\\') >= 0 {
		var err error
		if s.name, err = jsontext.AppendUnquote(s.name[:0], quoted); err != nil {
			return false
		}
		name = s.name
	}
	return bytes.EqualFold(name, want)
}

var errDuplicate = &DuplicateError{}

// appendScalar appends the key text of the raw JSON value v.
func appendScalar(dst []byte, v []byte) []byte {
	if len(v) == 0 {
		return dst
	}
	switch v[0] {
	case '"':
		out, err := jsontext.AppendUnquote(dst, v)
		if err != nil {
			return dst
		}
		return out
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
