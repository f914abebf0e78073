package routes

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"strconv"
	"strings"
	"testing"
)

// scanField runs the scanner as appendField does and reports, like
// oracleField, the value, whether the body is valid and whether a name
// on the path is duplicated.
func scanField(dst, raw []byte, path [][]byte) (out []byte, valid, dup bool) {
	if len(raw) == 0 || len(raw) > MaxKeyBody {
		return dst, false, false
	}
	s := scanner{b: raw, path: path}
	v, st := s.walk()
	s.kinds.release()
	switch st {
	case scanValid:
		return appendScalar(dst, v), true, false
	case scanDuplicate:
		return dst, false, true
	}
	return dst, false, false
}

// checkAgainstOracle fails when the scanner and the jsontext walk disagree
// on body along path.
func checkAgainstOracle(t *testing.T, body []byte, path [][]byte) {
	t.Helper()
	got, gotValid, gotDup := scanField(nil, body, path)
	want, wantValid, wantDup := oracleField(nil, body, path)
	if gotValid != wantValid || gotDup != wantDup || !bytes.Equal(got, want) {
		t.Fatalf("body %q, path %q: got %q valid=%v dup=%v; want %q valid=%v dup=%v (jsontext)",
			body, bytes.Join(path, []byte(".")), got, gotValid, gotDup, want, wantValid, wantDup)
	}
}

func splitPath(p string) [][]byte {
	var path [][]byte
	for _, e := range strings.Split(p, ".") {
		path = append(path, []byte(e))
	}
	return path
}

// scanCases are bodies whose validity, value or duplicates the scanner
// could get wrong; each is checked against jsontext and seeds the fuzz
// target.
var scanCases = []struct{ body, path string }{
	{`{"phone":"+15550001"}`, "phone"},
	{` {"phone" : "+1" } `, "phone"},
	{"\t\r\n{\"phone\":\"1\"}\n", "phone"},
	{`{"phone":"\u002b1555\u0030001"}`, "phone"},
	{`{"phone":"\ud83d\ude00 \u00e9\u20ac\/\"\\\b\f\n\r\t"}`, "phone"},
	{`{"phone":"\uD83D\uDE00"}`, "phone"},
	{`{"phone":"\ud83d"}`, "phone"},
	{`{"phone":"\ude00\ud83d"}`, "phone"},
	{`{"phone":"\ud83d\u0041"}`, "phone"},
	{`{"phone":"\ud83d\\"}`, "phone"},
	{`{"phone":"\u12"}`, "phone"},
	{`{"phone":"\u12g4"}`, "phone"},
	{`{"phone":"\x"}`, "phone"},
	{`{"phone":"\`, "phone"},
	{"{\"phone\":\"a\x01\"}", "phone"},
	{"{\"phone\":\"a\x7f\"}", "phone"},
	{"{\"phone\":\"\xff\"}", "phone"},
	{"{\"x\":\"\xff\",\"phone\":\"1\"}", "phone"},
	{"{\"phone\":\"\xed\xa0\x80\"}", "phone"},
	{"{\"phone\":\"\xc0\xaf\"}", "phone"},
	{"{\"phone\":\"\xef\xbf\xbd\xf0\x9f\x98\x80\"}", "phone"},
	{"{\"phone\":\"\xf0\x9f\x98\"}", "phone"},
	{"{\"\xff\":1}", "phone"},
	{`{"ph\u006fne":"x"}`, "phone"},
	{`{"PHON\u0045":"x"}`, "phone"},
	{`{"\u212aey":"b"}`, "key"},
	{`{"key":"a","\u212aey":"b"}`, "key"},
	{"{\"key\":\"a\",\"\u212aey\":\"b\"}", "key"},
	{`{"\ufffd":1}`, "\xff"},
	{`{"phone":"r1","Phone":"+15550001"}`, "phone"},
	{`{"phone":"r1","phone"`, "phone"},
	{`{"phone":"r1","phone" x`, "phone"},
	{`{"phone":"r1" "phone":2}`, "phone"},
	{`{"phone":"r1","phone`, "phone"},
	{`{"x":1,"X":2,"phone":3}`, "phone"},
	{`{"user":{"id":1},"USER":{"id":2}}`, "user.id"},
	{`{"user":{"id":1,"Id":2}}`, "user.id"},
	{`{"user":{"id":1}, "user":`, "user.id"},
	{`{"user":[{"id":1},{"id":2,"ID":3}]}`, "user.1.id"},
	{`{"user":[{"id":1,"id":4},{"id":2}]}`, "user.1.id"},
	{`{"a":{"b":{"c":"x"}}}`, "a.b.c"},
	{`{"a":[{"b":1}]}`, "a.0.b"},
	{`{"a":["x","y"]}`, "a.1"},
	{`{"a":["x","y"]}`, "a.+1"},
	{`{"a":["x","y"]}`, "a.-0"},
	{`{"a":["x","y"]}`, "a.01"},
	{`{"a":["x","y"]}`, "a.-1"},
	{`{"a":["x","y"]}`, "a.2"},
	{`{"a":["x","y"]}`, "a.99999999999999999999"},
	{`{"a":[]}`, "a.0"},
	{`{"a":{}}`, "a.b"},
	{`{"a":[[],[1]]}`, "a.1.0"},
	{`{"a":[1,]}`, "a.0"},
	{`{"a":[,1]}`, "a.0"},
	{`{"a":1,}`, "a"},
	{`{,"a":1}`, "a"},
	{`{"a" 1}`, "a"},
	{`{"a":1 "b":2}`, "a"},
	{`{"a":1]`, "a"},
	{`["a"}`, "0"},
	{`[{"phone":"1"}]`, "0.phone"},
	{`"phone"`, "phone"},
	{`1`, "0"},
	{`{"n":1}`, "n"},
	{`{"n":1.0}`, "n"},
	{`{"n":-0.0e-0}`, "n"},
	{`{"n":10E-1}`, "n"},
	{`{"n":1e400}`, "n"},
	{`{"n":-1e400}`, "n"},
	{`{"n":01}`, "n"},
	{`{"n":-}`, "n"},
	{`{"n":1.}`, "n"},
	{`{"n":.5}`, "n"},
	{`{"n":1e}`, "n"},
	{`{"n":1e+}`, "n"},
	{`{"n":+1}`, "n"},
	{`{"n":1.5e3x}`, "n"},
	{`{"n":123456789012345678901234567890}`, "n"},
	{`{"b":true,"c":false,"d":null}`, "b"},
	{`{"b":true,"c":false,"d":null}`, "c"},
	{`{"b":true,"c":false,"d":null}`, "d"},
	{`{"b":tru}`, "b"},
	{`{"b":nul}`, "b"},
	{`{"b":falsey}`, "b"},
	{`{"b":True}`, "b"},
	{`{"b":{"c":1}}`, "b"},
	{`{"b":[1]}`, "b"},
	{`{"phone":"1"} {"phone":"2"}`, "phone"},
	{`{"phone":"1"},`, "phone"},
	{`{"phone":"1"}`, "phone.x"},
	{`{"phone":"1"`, "phone"},
	{"\xef\xbb\xbf{\"phone\":\"1\"}", "phone"},
	{"{\"phone\":\"1\"}\x00", "phone"},
	{"{\"phone\":\"1\"}\v", "phone"},
	{`phone=%2B15550001`, "phone"},
	{` `, "phone"},
	{`{"a":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]],"b":"x"}`, "b"},
	{`{"a":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]},"b":"x"}`, "b"},
}

// TestJSONScanAgainstJSONText holds the scanner to the jsontext walk it
// replaced on each of scanCases.
func TestJSONScanAgainstJSONText(t *testing.T) {
	t.Parallel()
	for _, tc := range scanCases {
		checkAgainstOracle(t, []byte(tc.body), splitPath(tc.path))
	}
}

// TestJSONScanBlocks: off the path, strings are scanned 8 bytes a step
// (and those in the last 8 bytes by scanString), so each kind of byte a
// string may or may not hold is put at every offset across many steps'
// ends, in a name and in a value, and each body is also cut at every
// length.
func TestJSONScanBlocks(t *testing.T) {
	t.Parallel()
	path := splitPath("phone")
	for _, inner := range []string{
		``, `"`, `\"`, `\\`, `\u00e9`, `\ud83d\ude00`, `\ud83d`, `\x`, `\u00`,
		"\u00e9", "\xe2\x82\xac", "\xff", "\xed\xa0\x80", "\x01", "\x1f", "\x7f", "\t", "#", "\x00",
	} {
		for pad := 0; pad < 140; pad++ {
			fill := strings.Repeat("a", pad)
			for _, body := range []string{
				`{"x":"` + fill + inner + `b","phone":"1"}`,
				`{"` + fill + inner + `":1,"phone":"1"}`,
				`[` + fill[:pad/3] + `{"x":[1,"` + inner + fill + `"],"phone":2}]`,
			} {
				checkAgainstOracle(t, []byte(body), path)
			}
		}
	}
	pretty := "[" + strings.Repeat(`{"a":"\u00e9x", "b":"é",`+"\n\t"+`"c":[1.5,-2,true,null]},`, 20) + `{}]`
	for _, body := range [][]byte{kibBody(), []byte(pretty)} {
		for n := 1; n <= len(body); n++ {
			checkAgainstOracle(t, body[:n], path)
		}
	}
}

// TestJSONScanDepth: objects and arrays nest up to jsontext's 10,000
// levels, on the path and off it, and a body of nothing but openings is
// refused without recursing.
func TestJSONScanDepth(t *testing.T) {
	t.Parallel()
	nested := func(n int, open, inner, close string) string {
		return strings.Repeat(open, n) + inner + strings.Repeat(close, n)
	}
	zeros := func(n int) string { return strings.TrimSuffix(strings.Repeat("0.", n), ".") }
	for _, tc := range []struct {
		name, body, path string
		valid            bool
		want             string
	}{
		{"arrays at the bound", nested(maxDepth, "[", "1", "]"), "x", true, ""},
		{"arrays past the bound", nested(maxDepth+1, "[", "1", "]"), "x", false, ""},
		{"objects at the bound", nested(maxDepth, `{"":`, "1", "}"), "x", true, ""},
		{"objects past the bound", nested(maxDepth+1, `{"":`, "1", "}"), "x", false, ""},
		{"off the path past the bound", `{"a":` + nested(maxDepth, "[", "", "]") + `,"x":1}`, "x", false, ""},
		{"off the path at the bound", `{"a":` + nested(maxDepth-1, "[", "", "]") + `,"x":1}`, "x", true, "1"},
		{"on the path at the bound", nested(maxDepth, "[", "7", "]"), zeros(maxDepth), true, "7"},
		{"on the path past the bound", nested(maxDepth+1, "[", "7", "]"), zeros(maxDepth + 1), false, ""},
		{"only openings", strings.Repeat("[", MaxKeyBody), "0", false, ""},
		// Off the path below a deep path, fewer levels than the skipper's
		// word holds are left, or a word and some.
		{"50 left, 50 off the path", nested(maxDepth-50, "[", nested(50, "[", "", "]")+",7", "]"), zeros(maxDepth-51) + ".1", true, "7"},
		{"50 left, 51 off the path", nested(maxDepth-50, "[", nested(51, "[", "", "]")+",7", "]"), zeros(maxDepth-51) + ".1", false, ""},
		{"100 left, 100 off the path", nested(maxDepth-100, "[", nested(100, "[", "", "]")+",7", "]"), zeros(maxDepth-101) + ".1", true, "7"},
		{"100 left, 101 off the path", nested(maxDepth-100, "[", nested(101, "[", "", "]")+",7", "]"), zeros(maxDepth-101) + ".1", false, ""},
		{"126 left, 126 off the path", nested(maxDepth-126, "[", nested(126, "[", "", "]")+",7", "]"), zeros(maxDepth-127) + ".1", true, "7"},
		{"126 left, 127 off the path", nested(maxDepth-126, "[", nested(127, "[", "", "]")+",7", "]"), zeros(maxDepth-127) + ".1", false, ""},
		// Objects and arrays in turn across the words of the skipper's
		// stack, and values after each end, so a kind restored wrong fails.
		{"kinds across words", `{"a":` + nested(100, `[{"k":`, "1", `,"z":2}]`) + `,"x":1}`, "x", true, "1"},
		{"kinds across words, ends swapped", `{"a":` + nested(31, `[{"k":`, nested(1, `[{"k":`, "1", `]}`)+nested(1, `[{"k":`, "1", `,"z":2}]`), `,"z":2}]`) + `,"x":1}`, "x", false, ""},
		{"only object openings", strings.Repeat(`{"a":`, MaxKeyBody/5), "a", false, ""},
		// An object that follows another in an array (`},{"`) opens
		// without the check of the stack's room that others get.
		{"objects in turn at the bound", nested(maxDepth-1, "[", `{"a":1},{"b":2},{"c":3}`, "]"), "x", true, ""},
		{"objects in turn past the bound", nested(maxDepth, "[", `{"a":1},{"b":2}`, "]"), "x", false, ""},
		{"objects in turn off the path at the bound", `{"a":` + nested(maxDepth-2, "[", `{"a":1},{"b":2},{"c":3}`, "]") + `,"x":1}`, "x", true, "1"},
		// The first of them is skipped alone, with fewer levels left than
		// the skipper's word holds: the next is on the path.
		{"objects in turn deep on the path", nested(maxDepth-10, "[", `{"a":1},{"b":2}`, "]"), zeros(maxDepth-11) + ".1.b", true, "2"},
		{"objects in turn deep on the path, strings", nested(maxDepth-10, "[", `{"a":"1"},{"b":2}`, "]"), zeros(maxDepth-11) + ".1.b", true, "2"},
		{"objects in turn off the path past the bound", `{"a":` + nested(maxDepth-1, "[", `{"a":1},{"b":2}`, "]") + `,"x":1}`, "x", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := splitPath(tc.path)
			got, valid, dup := scanField(nil, []byte(tc.body), path)
			if valid != tc.valid || dup || string(got) != tc.want {
				t.Fatalf("got %q valid=%v dup=%v, want %q valid=%v", got, valid, dup, tc.want, tc.valid)
			}
			checkAgainstOracle(t, []byte(tc.body), path)
		})
	}
}

// TestJSONScanObjectsInTurn: the skipper opens an object that follows
// another in an array at once; at every depth around the words of its
// stack, after each kind of value, objects and arrays still close in
// order and the depth bound holds.
func TestJSONScanObjectsInTurn(t *testing.T) {
	t.Parallel()
	path := splitPath("x")
	for depth := 0; depth < 200; depth++ {
		for _, inner := range []string{
			`{"a":1},{"b":"c"},{"d":[{}]},{"e":{"f":2}}`,
			`{"a":1},{"b":2}`, `{"a":1},{"b":2}]`, `{"a":1},{"b":2}}`, `{"a":1},{}`, `{"a":1},{,`, `{"a":1},{"`,
			`{"a":[1]},{"b":2},[3],{"c":4}`, `[{"a":1},{"b":2}],{"c":3}`,
		} {
			for _, body := range []string{
				`{"a":` + strings.Repeat("[", depth) + inner + strings.Repeat("]", depth) + `,"x":1}`,
				// In an object instead, the object that follows is invalid.
				`{"a":` + strings.Repeat("[", depth) + `{"p":` + inner + `}` + strings.Repeat("]", depth) + `,"x":1}`,
			} {
				checkAgainstOracle(t, []byte(body), path)
			}
		}
	}
}

// TestJSONScanRepeatedNames: the skipper takes a name that an earlier
// object had at the same place from the bytes alone, so each object after
// the first has a name that differs from the one before it in a byte, at
// each place of the name, its quote and colon, by a byte of each kind,
// or equals it but for what follows the colon.
func TestJSONScanRepeatedNames(t *testing.T) {
	t.Parallel()
	path := splitPath("x")
	for n := 0; n <= 9; n++ {
		name := strings.Repeat("n", n)
		first := `{"a":0,"` + name + `":1}`
		var nexts []string
		for i := 0; i <= n+1; i++ {
			for _, c := range []string{"m", `"`, `"`, `\`, `n`, "", "ÿ", "é", " ", ":"} {
				other := name + `":`
				other = other[:i] + c + other[i+1:]
				nexts = append(nexts, `{"a":0,"`+other+`1}`)
			}
		}
		nexts = append(nexts, `{"a":0,"`+name+`":"s"}`, `{"a":0,"`+name+`" :1}`, `{"a":0,"`+name+`"`, `{"a":0,"`+name+`":`, `{"a":0,"`+name+`"}`)
		for _, next := range nexts {
			for _, body := range []string{
				`{"x":1,"a":[` + first + `,` + next + `]}`,
				`{"x":1,"a":[` + first + `,` + first + `,` + next + `,` + first + `]}`,
				`{"x":1,"a":[{"o":` + first + `},{"o":` + next + `}]}`,
				// Values skipped one by one keep the names of those before.
				`{"f0":` + first + `,"f1":` + next + `,"x":1}`,
				`{"f0":[` + first + `],"f1":` + first + `,"f2":[` + next + `],"x":1}`,
			} {
				checkAgainstOracle(t, []byte(body), path)
			}
		}
	}
}

// TestJSONScanNameCacheOff: objects whose first name is not the one an
// earlier object had first turn the skipper's name cache off for a while
// (see nameCacheOff). Names read while it is off, and those compared
// when it is on again, are checked byte for byte all the same, and an
// entry never kept, all zeros, lets no name of 8 NUL bytes through.
func TestJSONScanNameCacheOff(t *testing.T) {
	t.Parallel()
	path := splitPath("x")
	turns := []string{`{"id":1,"sku":"s","qty":2}`, `{"sku":"s","qty":2,"id":1}`, `{"qty":2,"id":1,"sku":"s"}`}
	nul := strings.Repeat("\x00", 8)
	lasts := []string{
		turns[0], turns[1], `{"id":1}`, `{}`,
		`{"id":1,"sk` + "\x00" + `":"s","qty":2}`,
		`{"id":1,"sku":"s","qty` + "\x01" + `":2}`,
		`{"id":1,"sku":"s","q` + "\xff" + `y":2}`,
		`{"ie":1,"sku":"s","qty":2}`,
		`{"i\u0064":1,"sku":"s","qty":2}`,
		`{"id" :1,"sku":"s","qty":2}`,
		`{"id"1}`, `{"id":1,"sku"}`, `{"id":1,"sku":"s","qty":2`,
		`{"` + nul + `":1}`, `{"id":1,"` + nul + `":1}`, `{"` + nul + nul + `":1}`,
	}
	for n := 0; n <= 40; n++ {
		var b strings.Builder
		for i := range n {
			b.WriteString(turns[i%len(turns)] + ",")
		}
		for _, last := range lasts {
			for _, body := range []string{
				`{"x":1,"a":[` + b.String() + last + `]}`,
				`{"x":1,"a":[` + b.String() + turns[0] + `,` + last + `]}`,
				`{"x":1,"a":[` + b.String() + `{"o":` + last + `}]}`,
				`{"f0":[` + b.String() + `{}],"f1":` + last + `,"x":1}`,
				`{"f0":[` + b.String() + `{}],"f1":[` + turns[1] + `,` + last + `],"x":1}`,
			} {
				checkAgainstOracle(t, []byte(body), path)
			}
		}
	}
}

// TestJSONScanMembersInTurn: the walk reads the members of an object on
// the path one after another where each value off the path is followed
// at once by the next name, and leaves everything else (arrays, spaces,
// the end of the object, a value at the top) to its general loop.
func TestJSONScanMembersInTurn(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		body, path, want string
		valid, dup       bool
	}{
		{`{"a":1,"b":{"c":2},"x":"v"}`, "x", "v", true, false},
		{`{"a":1,"x":"v","b":2}`, "x", "v", true, false},
		{`{"a":1,"x":"v","X":"w"}`, "x", "", false, true},
		{`{"x":"v","a":1,"X":"w"}`, "x", "", false, true},
		{`{"a":1,"x":{"y":"v","z":1},"y":2}`, "x.y", "v", true, false},
		{`{"a":1,"x":{"z":1,"y":"v"},"y":2}`, "x.y", "v", true, false},
		{`{"a":1,"x":{"z":1,"Y":"v","y":"w"}}`, "x.y", "", false, true},
		{`[1,"x"]`, "1", "x", true, false},
		{`[1,"x",{"x":"v"}]`, "2.x", "v", true, false},
		{`{"a":[1,"x"],"x":"v"}`, "x", "v", true, false},
		{`{"a":1 ,"x":"v"}`, "x", "v", true, false},
		{`{"a":1, "x":"v"}`, "x", "v", true, false},
		{`{"a":1,"x" :"v"}`, "x", "v", true, false},
		{`{"a":1,"b":2}`, "x", "", true, false},
		{`{"a":1,"b":2,}`, "x", "", false, false},
		{`{"a":1,"b"}`, "x", "", false, false},
		{`{"a":1,"`, "x", "", false, false},
		{`{"a":1,"x`, "x", "", false, false},
		{`"x"`, "x", "", true, false},
		{`"x","a"`, "x", "", false, false},
	} {
		got, valid, dup := scanField(nil, []byte(tc.body), splitPath(tc.path))
		if string(got) != tc.want || valid != tc.valid || dup != tc.dup {
			t.Errorf("body %q, path %q: got %q valid=%v dup=%v, want %q valid=%v dup=%v", tc.body, tc.path, got, valid, dup, tc.want, tc.valid, tc.dup)
		}
		checkAgainstOracle(t, []byte(tc.body), splitPath(tc.path))
	}
}

// TestJSONScanLiterals: a member's true, false or null that the next
// name follows at once is read with the comma and the name's quote as
// one word (see skipper.run); each byte of the literal changed, and every
// ending near the body's end, reads as the oracle reads it.
func TestJSONScanLiterals(t *testing.T) {
	t.Parallel()
	path := splitPath("x")
	for _, lit := range []string{"true", "false", "null"} {
		lits := []string{lit, lit[:len(lit)-1]}
		for i := range lit {
			for _, c := range []string{"x", `"`, ",", "\x00", "é"} {
				lits = append(lits, lit[:i]+c+lit[i+1:])
			}
		}
		for _, l := range lits {
			for _, tail := range []string{`,"b":1}`, `,"b":{"c":1}}`, `,"b"}`, `,"`, `,`, `}`, ` ,"b":1}`, `,` + lit + `}`, `,"\u0062":1}`, `, "b":1}`, `,{"b":1}`, `,["b":1}`} {
				for _, after := range []string{"", `,"zzzzzzzzzzzzzz":0}`} {
					body := `{"a":{"k":` + l + tail
					if after != "" {
						body += after
					} else {
						body += "}"
					}
					checkAgainstOracle(t, []byte(body), path)
					checkAgainstOracle(t, []byte(`{"a":[{"k":1},{"k":`+l+tail+`]}`), path)
				}
			}
		}
	}
}

// TestJSONScanPathNames: the names of the objects on the path, short
// and plain or not, match in any letter case, Unicode's simple folding
// included, at every length around a word's 8 bytes.
func TestJSONScanPathNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ body, path, want string }{
		{`{"key":"a"}`, "KEY", "a"},
		{`{"kEy":"a"}`, "Key", "a"},
		{`{"key":"a"}`, "Key", "a"}, // the Kelvin sign folds to k
		{`{"Ks":"a"}`, "kſ", "a"},   // and the long s to s
		{`{"key":"a","Key":"b"}`, "KEY", ""},
		{`{"kez":"a"}`, "Key", ""},
		{`{"abc":"a"}`, "K", ""}, // as long as the name, but not it
		{`{"k":"a"}`, "K", "a"},
		{`{"k@":"a"}`, "K`", ""}, // @ and ` differ in bit 5 but are no letters
		{`{"[":"a"}`, "{", ""},
		{`{"":"a"}`, "", "a"},
		// Names of 8 to 15 bytes end in the word after their first 8.
		{`{"field_10":"a"}`, "FIELD_10", "a"},
		{`{"field_10key":"a"}`, "field_10Key", "a"},
		{`{"field_10":"a","Field_10":"b"}`, "field_10", ""},
		{`{"field_10":"a"}`, "field_1", ""},
		{`{"field_1\u0030":"a"}`, "field_10", "a"},
		{`{"fieldfield_10":"a"}`, "fieldfield_10", "a"},
		{`{"key" :"a"}`, "KEY", "a"},
		{`{"key": "a"}`, "KEY", "a"},
		{`{"key":"a","ke\u0079":"b"}`, "KEY", ""},
		{`{"fieldfield_1000":"a"}`, "FIELDFIELD_1000", "a"},
		{`{"fieldfield_10000":"a"}`, "FIELDFIELD_10000", "a"},
	} {
		path := splitPath(tc.path)
		// As it is, and with more after it, so that the name is not
		// in the body's last 16 bytes (see member).
		for _, body := range []string{tc.body, strings.TrimSuffix(tc.body, "}") + `,"zzzzzzzzzzzzzzzzzzzz":0}`} {
			got, valid, dup := scanField(nil, []byte(body), path)
			if !valid && !dup || string(got) != tc.want {
				t.Errorf("body %q, path %q: got %q valid=%v dup=%v, want %q", body, tc.path, got, valid, dup, tc.want)
			}
			checkAgainstOracle(t, []byte(body), path)
		}
	}
	for n := 0; n < 20; n++ {
		name := strings.Repeat("n", n)
		for _, want := range []string{name, strings.ToUpper(name), name + "x", strings.TrimSuffix(name, "n")} {
			for _, body := range []string{
				`{"` + name + `":"v"}`,
				`{"` + name + `":"v","` + name + `":"w"}`,
				`{"a":1,"` + name + `" : {"` + name + `":2}}`,
				`{"` + name + `":1}`, // the name's end in the last 8 bytes
			} {
				checkAgainstOracle(t, []byte(body), splitPath(want))
			}
		}
	}
}

// TestArrayIndex: a path element indexes an array exactly when
// strconv.Atoi reads it as a number >= 0.
func TestArrayIndex(t *testing.T) {
	t.Parallel()
	for _, p := range []string{
		"0", "1", "007", "+1", "-0", "-000", "-1", "+", "-", "", "1a", "a1", " 1", "1_0", "0x1",
		"9223372036854775807", "9223372036854775808", "-9223372036854775808", "00000000000000000000000001",
		"-00000000000000000000000000", "+9223372036854775807", "99999999999999999999",
	} {
		want := -1
		if i, err := strconv.Atoi(p); err == nil && i >= 0 {
			want = i
		}
		if got := arrayIndex([]byte(p)); got != want {
			t.Errorf("arrayIndex(%q): got %d, want %d", p, got, want)
		}
	}
}

// FuzzJSONScan: on any body and path, the scanner agrees with the
// jsontext walk it replaced on the body's validity, the value found and
// duplicate names.
func FuzzJSONScan(f *testing.F) {
	for _, tc := range scanCases {
		f.Add([]byte(tc.body), tc.path)
	}
	f.Add(kibBody(), "phone")
	f.Add(kibBody(), "items.3.sku")
	f.Fuzz(func(t *testing.T, body []byte, path string) {
		src, err := parseSource("json:" + path)
		if err != nil {
			return
		}
		checkAgainstOracle(t, body, src.path)
		if i := arrayIndex([]byte(path)); !strings.Contains(path, ".") {
			want := -1
			if n, err := strconv.Atoi(path); err == nil && n >= 0 {
				want = n
			}
			if i != want {
				t.Fatalf("arrayIndex(%q): got %d, want %d (strconv.Atoi)", path, i, want)
			}
		}
	})
}

// TestStringSpecial: every byte that does not stand for itself in a
// string is marked wherever it sits among 8, whatever the bytes below it,
// and the lowest mark is always such a byte, as the scans of strings rely
// on.
func TestStringSpecial(t *testing.T) {
	t.Parallel()
	// Below each tested byte: plain bytes, quotes, controls and high bytes,
	// which are what can send a borrow up.
	fills := []byte{'a', ' ', '!', '#', '"', '\\', 0x00, 0x1f, 0x20, 0x21, 0x7f, 0x80, 0xff}
	for c := 0; c < 256; c++ {
		special := !stringPlain[c]
		for i := 0; i < 8; i++ {
			for _, below := range fills {
				for _, above := range fills {
					var w [8]byte
					for j := range w {
						switch {
						case j < i:
							w[j] = below
						case j > i:
							w[j] = above
						default:
							w[j] = byte(c)
						}
					}
					m := stringSpecial(binary.LittleEndian.Uint64(w[:])) & highs
					if special && m>>(8*i+7)&1 == 0 {
						t.Fatalf("%q: byte %d (%#x) not marked", w, i, c)
					}
					if m != 0 {
						if low := bits.TrailingZeros64(m) >> 3; stringPlain[w[low]] {
							t.Fatalf("%q: lowest mark on plain byte %d", w, low)
						}
					} else if special || !stringPlain[below] && i > 0 || !stringPlain[above] && i < 7 {
						t.Fatalf("%q: nothing marked", w)
					}
				}
			}
		}
	}
}
