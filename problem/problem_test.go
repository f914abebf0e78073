package problem

import (
	"net/http/httptest"
	"testing"
)

func TestWrite(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	Write(rec, Details{Status: 429, Detail: "limit otp reached", Policy: "otp", RetryAfter: 3})
	if got, want := rec.Code, 429; got != want {
		t.Errorf("status: got %d, want %d", got, want)
	}
	if got, want := rec.Header().Get("Content-Type"), "application/problem+json"; got != want {
		t.Errorf("content type: got %q, want %q", got, want)
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
