package routes

import (
	"bytes"
	"encoding/json"
	"io"
	"strconv"
	"sync"
)

// MaxKeyBody is the largest request body in bytes that json: key sources
// look into; the gateway reads no more than this before deciding. A larger
// body gives those sources an empty value.
const MaxKeyBody = 64 << 10

// Body is a request body read for json: key sources. It parses the JSON at
// most once, on first use, so a route with several json: sources pays for
// one parse and a route whose keys need no body pays nothing. Create it
// with NewBody; it is safe for concurrent use.
type Body struct {
	raw  []byte
	once sync.Once
	v    any
	ok   bool
}

// NewBody wraps raw, which the caller must not modify afterwards. A body
// larger than MaxKeyBody, or not a single JSON value, yields empty values.
func NewBody(raw []byte) *Body { return &Body{raw: raw} }

func (b *Body) parse() {
	if len(b.raw) > MaxKeyBody {
		return
	}
	dec := json.NewDecoder(bytes.NewReader(b.raw))
	dec.UseNumber() // numbers keep their JSON text
	if err := dec.Decode(&b.v); err != nil {
		return
	}
	if _, err := dec.Token(); err != io.EOF {
		b.v = nil
		return
	}
	b.ok = true
}

// appendField appends the scalar at path: strings by value, numbers and
// booleans by their JSON text. Objects, arrays, null and missing fields
// append nothing. A path element that is a whole number indexes an array.
func (b *Body) appendField(dst []byte, path []string) []byte {
	if b == nil {
		return dst
	}
	b.once.Do(b.parse)
	if !b.ok {
		return dst
	}
	v := b.v
	for _, p := range path {
		switch c := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = c[p]; !ok {
				return dst
			}
		case []any:
			i, err := strconv.Atoi(p)
			if err != nil || i < 0 || i >= len(c) {
				return dst
			}
			v = c[i]
		default:
			return dst
		}
	}
	switch s := v.(type) {
	case string:
		return append(dst, s...)
	case json.Number:
		return append(dst, s...)
	case bool:
		return strconv.AppendBool(dst, s)
	}
	return dst
}
