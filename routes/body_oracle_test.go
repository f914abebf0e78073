package routes

import (
	"bytes"
	"io"
	"strconv"
	"sync"

	"github.com/go-json-experiment/json/jsontext"
)

// oracleField is the json: lookup as it was before the hand-written
// scanner: a walk with jsontext's tokenizer, which validates the body as
// it goes. The fuzz and benchmark comparisons hold the scanner to it.
// It returns the value appended to dst, whether the body was one valid
// JSON value, and whether a name on the path occurs twice.
func oracleField(dst, raw []byte, path [][]byte) (out []byte, valid, dup bool) {
	if len(raw) == 0 || len(raw) > MaxKeyBody {
		return dst, false, false
	}
	s := oracleScanners.Get().(*oracleScanner)
	defer oracleScanners.Put(s)
	s.in = *bytes.NewBuffer(raw)
	s.dec.Reset(&s.in, jsontext.AllowDuplicateNames(true))
	s.path, s.found, s.dup = path, nil, false
	defer func() { s.path, s.found, s.in = nil, nil, bytes.Buffer{} }()
	err := s.value(0)
	if s.dup {
		return dst, false, true
	}
	if err != nil {
		return dst, false, false
	}
	if _, err := s.dec.ReadToken(); err != io.EOF {
		return dst, false, false
	}
	return oracleScalar(dst, s.found), true, false
}

type oracleScanner struct {
	dec   jsontext.Decoder
	in    bytes.Buffer
	name  []byte
	path  [][]byte
	found []byte
	dup   bool
}

var errDuplicate = &DuplicateError{}

var oracleScanners = sync.Pool{New: func() any { return new(oracleScanner) }}

func (s *oracleScanner) value(depth int) error {
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

func (s *oracleScanner) matches(quoted []byte, want []byte) bool {
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

func oracleScalar(dst []byte, v []byte) []byte {
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
