package problem

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestWrite(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	Write(rec, Details{Status: 429, Detail: "limit otp reached", Policy: "otp", RetryAfter: 3})
	if got, want := rec.Code, 429; got != want {
		t.Errorf("status: got %d, want %d", got, want)
	}
	for name, want := range map[string]string{
		"Content-Type":           "application/problem+json",
		"X-Content-Type-Options": "nosniff",
		"Cache-Control":          "no-store",
	} {
		if got := rec.Header().Get(name); got != want {
			t.Errorf("%s: got %q, want %q", name, got, want)
		}
	}
	want := `{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"limit otp reached","policy":"otp","retry_after":3}` + "\n"
	if got := rec.Body.String(); got != want {
		t.Errorf("body: got %s, want %s", got, want)
	}
}

func TestErrorOmitsExtensions(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	Error(rec, 404, "no route matches GET /x")
	want := `{"type":"about:blank","title":"Not Found","status":404,"detail":"no route matches GET /x"}` + "\n"
	if got := rec.Body.String(); got != want {
		t.Errorf("body: got %s, want %s", got, want)
	}
}

// TestAppendMatchesEncodingJSON holds the hand-written encoder to what
// json.Marshal gives for the same Details, byte for byte.
func TestAppendMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	strs := []string{"", "plain", `quote " and \ backslash`, "<script>&amp;</script>", "tab\tnl\nret\rbs\bff\f",
		"\x00\x01\x1f\x7f", "ünïcødé ✓ 𝄞", "bad \xff utf-8 \xc3", "line\u2028para\u2029", "rate limit otp#1 of route otp exceeded: 5 requests per 10m0s; retry in 3 s"}
	// AppendString skips plain bytes eight at a time: put each kind of
	// byte it must stop at at every place of the first blocks.
	for k := range 18 {
		for _, c := range []string{`"`, `\`, "<", ">", "&", "\x00", "\x1f", "\x7f", "é", "\xff", "\u2028"} {
			strs = append(strs, strings.Repeat("x", k)+c+strings.Repeat("y", 17-k))
		}
	}
	for _, s := range strs {
		for _, p := range []Details{
			{Status: 429, Detail: s, Policy: s, RetryAfter: 7},
			{Type: s, Title: s, Status: 418, Instance: s},
			{Status: 404, Detail: s},
			{Status: 599},
		} {
			want, err := json.Marshal(withDefaults(p))
			if err != nil {
				t.Fatal(err)
			}
			if got := Append(nil, p); !bytes.Equal(got, want) {
				t.Errorf("Append(%+v):\n got %s\nwant %s", p, got, want)
			}
		}
	}
}

func FuzzAppendString(f *testing.F) {
	f.Add("a\"b<\xff\u2028")
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := AppendString(nil, s); !bytes.Equal(got, want) {
			t.Errorf("AppendString(%q): got %s, want %s", s, got, want)
		}
	})
}

func withDefaults(p Details) Details {
	if p.Type == "" {
		p.Type = "about:blank"
	}
	if p.Title == "" {
		p.Title = http.StatusText(p.Status)
	}
	return p
}

func TestWriteAllocations(t *testing.T) {
	w := &discardWriter{h: http.Header{}}
	p := Details{Status: 429, Detail: "rate limit otp of route otp exceeded", Policy: "otp", RetryAfter: 3}
	if n := testing.AllocsPerRun(100, func() { Write(w, p) }); n > 0 {
		t.Errorf("Write: got %v allocations, want 0", n)
	}
}

type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(int)             {}
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
