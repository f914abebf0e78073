package routes

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

// TestJSONKey lists the ways one JSON value can be spelled and what a
// json: source makes of each.
func TestJSONKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, source, body, want string
		dup                      bool
	}{
		{"string", "json:phone", `{"phone":"+15550001"}`, "+15550001", false},
		{"string unescaped", "json:phone", `{"phone":"\u002b1555\u0030001"}`, "+15550001", false},
		{"name escaped", "json:phone", `{"ph\u006fne":"+15550001"}`, "+15550001", false},
		{"name in another case", "json:phone", `{"Phone":"+15550001"}`, "+15550001", false},
		{"same name twice in another case", "json:phone", `{"phone":"r1","Phone":"+15550001"}`, "", true},
		{"same name twice", "json:phone", `{"phone":"r1","phone":"+15550001"}`, "", true},
		{"same name twice escaped", "json:phone", `{"phone":"r1","PHON\u0045":"+15550001"}`, "", true},
		{"Kelvin sign folds to k", "json:key", `{"key":"a","\u212aey":"b"}`, "", true},
		{"duplicate on the path", "json:user.id", `{"user":{"id":1},"USER":{"id":2}}`, "", true},
		{"duplicate inside the value", "json:user.id", `{"user":{"id":1,"Id":2}}`, "", true},
		{"duplicate off the path is fine", "json:phone", `{"phone":"1","x":1,"X":2}`, "1", false},
		{"integer", "json:n", `{"n":1}`, "1", false},
		{"integer as decimal", "json:n", `{"n":1.0}`, "1", false},
		{"integer with exponent", "json:n", `{"n":1e0}`, "1", false},
		{"integer with big exponent", "json:n", `{"n":10E-1}`, "1", false},
		{"minus zero", "json:n", `{"n":-0.0}`, "0", false},
		{"fraction", "json:n", `{"n":1.50}`, "1.5", false},
		{"large", "json:n", `{"n":15550001000}`, "15550001000", false},
		{"huge", "json:n", `{"n":1e300}`, "1e+300", false},
		{"out of float range", "json:n", `{"n":1e400}`, "+Inf", false},
		{"bool", "json:b", `{"b":true}`, "true", false},
		{"null", "json:b", `{"b":null}`, "", false},
		{"object", "json:b", `{"b":{"c":1}}`, "", false},
		{"array index", "json:a.1", `{"a":["x","y"]}`, "y", false},
		{"array index out of range", "json:a.2", `{"a":["x","y"]}`, "", false},
		{"not an index", "json:a.x", `{"a":["x","y"]}`, "", false},
		{"form body", "json:phone", `phone=%2B15550001`, "", false},
		{"trailing data", "json:phone", `{"phone":"1"} {"phone":"2"}`, "", false},
		{"truncated", "json:phone", `{"phone":"1"`, "", false},
		{"invalid UTF-8", "json:phone", "{\"phone\":\"\xff\"}", "", false},
		{"top-level array", "json:0.phone", `[{"phone":"1"}]`, "1", false},
		// lodash's _.get(body, "user.phone") and Laravel's Arr::get read
		// a member named "user.phone" when the object has one: another
		// spelling of the field.
		{"dotted name beside the field", "json:user.phone", `{"user.phone":"victim","user":{"phone":"r1"}}`, "", true},
		{"dotted name after the field", "json:user.phone", `{"user":{"phone":"r1"},"User.PHONE":"victim"}`, "", true},
		{"dotted name escaped", "json:user.phone", `{"user\u002ephone":"victim","user":{"phone":"r1"}}`, "", true},
		{"dotted name twice", "json:user.phone", `{"user.phone":"victim","user.phone":"r1"}`, "", true},
		{"dotted name alone", "json:user.phone", `{"user.phone":"victim"}`, "victim", false},
		{"dotted name with an index", "json:items.0.id", `{"items.0.id":"victim","items":[{"id":"r1"}]}`, "", true},
		{"dotted name below the top is no spelling", "json:a.b.c", `{"a":{"b.c":"victim","b":{"c":"r1"}}}`, "r1", false},
		{"a dot in a value is no spelling", "json:user.phone", `{"user":{"phone":"r1","mail":"a.b@example.com"},"n":1.5}`, "r1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			k := keyOf(t, "otp", tc.source)
			got, err := k.Append(nil, httptest.NewRequest("POST", "/", nil), netip.Addr{}, NewBody([]byte(tc.body)))
			var de *DuplicateError
			if tc.dup {
				if !errors.As(err, &de) || de.Source != tc.source {
					t.Fatalf("got %q, %v; want a DuplicateError naming %s", got, err, tc.source)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Errorf("got %q, %v; want %q, nil", got, err, tc.want)
			}
		})
	}
}

func TestMediaTypeProblem(t *testing.T) {
	t.Parallel()
	for ct, want := range map[string]bool{
		"application/json":                    false,
		" application/json; charset=utf-8":    false,
		"application/json;a=\"b, c\"":         false,
		"application/json, text/plain":        true,
		"application/json,":                   true,
		"application/json text/plain":         true,
		"application/json;charset=utf-8, x/y": false,
		"text/plain, application/json":        true,
		// restify 11.1.0 reads the blank as part of the media type:
		// "application/json " is no JSON to its bodyParser (a +json
		// type, which it matches by its start, is refused alike).
		" application/json ; charset=utf-8":     true,
		"application/json\t;charset=utf-8, x/y": true,
		"application/vnd.api+json ;x=y":         true,
		"text/plain ; charset=utf-8":            false,
	} {
		if got := MediaTypeProblem(ct) != ""; got != want {
			t.Errorf("MediaTypeProblem(%q) != \"\": got %v, want %v", ct, got, want)
		}
	}
}

func TestIsJSON(t *testing.T) {
	t.Parallel()
	for ct, want := range map[string]bool{
		"application/json":                  true,
		"Application/JSON; charset=utf-8":   true,
		"application/vnd.api+json":          true,
		"application/merge-patch+JSON":      true,
		"application/+json":                 false,
		"application/x-www-form-urlencoded": false,
		"text/json":                         false,
		"application/jsonx":                 false,
		"application/a b+json":              false,
		"":                                  false,
		"multipart/form-data; boundary=x":   false,
	} {
		if got := IsJSON(ct); got != want {
			t.Errorf("IsJSON(%q): got %v, want %v", ct, got, want)
		}
	}
}

// kibBody is a 1 KiB JSON body with the key field last, so the scan covers
// all of it.
func kibBody() []byte {
	var b strings.Builder
	b.WriteString(`{"user":{"name":"Ada Lovelace","email":"ada@example.com","tags":["a","b","c"]},"items":[`)
	for i := 0; b.Len() < 960; i++ {
		fmt.Fprintf(&b, `{"id":%d,"sku":"SKU-%05d","qty":%d},`, i, i, i%7)
	}
	b.WriteString(`{"id":0}],"phone":"+15550001"}`)
	return []byte(b.String())
}

// TestJSONKeyAllocs: a json: key allocates nothing, on a 1 KiB body, on
// one whose names on the path are escaped, and on one nested deeper than
// the scanner keeps in line.
func TestJSONKeyAllocs(t *testing.T) {
	deep := strings.Repeat("[", 500) + strings.Repeat("]", 500)
	for _, tc := range []struct {
		name, source, body, want string
	}{
		{"1 KiB", "json:phone", string(kibBody()), "+15550001"},
		{"escaped names", "json:user.phone", `{"\u0075ser":{"x":"\u00e9","ph\u006fne":"+1\u0035"}}`, "+15"},
		{"deep", "json:phone", `{"a":` + deep + `,"phone":"1"}`, "1"},
		{"a dotted path on a body with a dot", "json:user.phone", `{"user":{"phone":"1.5"},"user.x":1}`, "1.5"},
		// A whole dotted path is a long name to compare every top-level
		// member with, escaped names of any length among them.
		{"a long dotted path and long escaped names", "json:customer.billing_address.phone_number",
			`{"\u0061` + strings.Repeat("b", 130) + `":1,"customer":{"billing_address":{"phone_number":"1"}},"x":1.5}`, "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := []byte(tc.body)
			k := keyOf(t, "otp", tc.source)
			r := httptest.NewRequest("POST", "/", nil)
			buf := make([]byte, 0, 64)
			buf, _ = k.Append(buf[:0], r, netip.Addr{}, NewBody(raw))
			if string(buf) != tc.want {
				t.Fatalf("got %q, want %q", buf, tc.want)
			}
			if got := testing.AllocsPerRun(200, func() { buf, _ = k.Append(buf[:0], r, netip.Addr{}, NewBody(raw)) }); got != 0 {
				t.Errorf("got %v allocs per json: key, want 0", got)
			}
		})
	}
}

// byteLoopSink keeps the byte-loop baseline from being optimised away.
var byteLoopSink int

// classSum is the byte-loop baseline's pass over b. It is a function of
// its own so that the sum stays in a register: written inline in the
// benchmark, the compiler kept it in memory, and the loop then measured a
// store-to-load round trip per byte, which some CPUs (Zen 1) take 7 or 8
// cycles for and others hide.
//
//go:noinline
func classSum(class *[256]uint8, b []byte) int {
	n := 0
	for _, c := range b {
		n += int(class[c])
	}
	return n
}

// kibBodyTurned is kibBody with each record's members in another order
// than the record before it, so that the skipper never finds a name
// where the object before had it (see nameCache): the cost of a body
// whose records do not repeat their shape.
func kibBodyTurned() []byte {
	var b strings.Builder
	b.WriteString(`{"user":{"name":"Ada Lovelace","email":"ada@example.com","tags":["a","b","c"]},"items":[`)
	for i := 0; b.Len() < 960; i++ {
		id, sku, qty := fmt.Sprintf(`"id":%d`, i), fmt.Sprintf(`"sku":"SKU-%05d"`, i), fmt.Sprintf(`"qty":%d`, i%7)
		switch i % 3 {
		case 0:
			fmt.Fprintf(&b, `{%s,%s,%s},`, id, sku, qty)
		case 1:
			fmt.Fprintf(&b, `{%s,%s,%s},`, sku, qty, id)
		default:
			fmt.Fprintf(&b, `{%s,%s,%s},`, qty, id, sku)
		}
	}
	b.WriteString(`{"id":0}],"phone":"+15550001"}`)
	return []byte(b.String())
}

// kibBodyFields is a 1 KiB body of another shape: an object of members
// with names of their own ("field_0", "field_1"...), each a small object
// with a string, a literal and a number, and phone last.
func kibBodyFields() []byte {
	var b strings.Builder
	b.WriteString(`{`)
	for i := 0; b.Len() < 980; i++ {
		fmt.Fprintf(&b, `"field_%d":{"name":"value number %d","enabled":true,"count":%d},`, i, i, i*37)
	}
	b.WriteString(`"phone":"+15550001"}`)
	return []byte(b.String())
}

func BenchmarkJSONKey(b *testing.B) {
	raw := kibBody()
	k := keyOf(b, "otp", "json:phone")
	r := httptest.NewRequest("POST", "/", nil)
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 64)
		for b.Loop() {
			buf, _ = k.Append(buf[:0], r, netip.Addr{}, NewBody(raw))
		}
	})
	for _, other := range []struct {
		name string
		body []byte
	}{{"serial-turned", kibBodyTurned()}, {"serial-fields", kibBodyFields()}} {
		b.Run(other.name, func(b *testing.B) {
			b.ReportAllocs()
			buf := make([]byte, 0, 64)
			for b.Loop() {
				buf, _ = k.Append(buf[:0], r, netip.Addr{}, NewBody(other.body))
				if string(buf) != "+15550001" {
					b.Fatalf("got %q", buf)
				}
			}
		})
	}
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			buf := make([]byte, 0, 64)
			for pb.Next() {
				buf, _ = k.Append(buf[:0], r, netip.Addr{}, NewBody(raw))
			}
		})
	})
	// Baselines in the same run: what validating the body alone costs,
	// the jsontext walk json: sources used before the scanner, and what
	// decoding it whole, as they did before that, cost.
	// The floor of any byte-at-a-time scan: a loop that only reads each
	// byte through a table, as a tokenizer's state machine must at least.
	b.Run("baseline-byte-loop", func(b *testing.B) {
		var class [256]uint8
		for _, c := range `{}[],:"\\` {
			class[c] = 1
		}
		n := 0
		for b.Loop() {
			n += classSum(&class, raw)
		}
		byteLoopSink = n
	})
	b.Run("baseline-json.Valid", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			json.Valid(raw)
		}
	})
	b.Run("baseline-jsontext", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 64)
		path := [][]byte{[]byte("phone")}
		for b.Loop() {
			buf, _, _ = oracleField(buf[:0], raw, path)
		}
	})
	b.Run("baseline-decode-whole", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var v map[string]any
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.UseNumber()
			dec.Decode(&v)
			_ = v["phone"]
		}
	})
}
