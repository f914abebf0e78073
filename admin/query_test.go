package admin

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/ratelimit"
)

// TestMalformedQueryIs400: url.Query drops a pair it cannot parse (a ';'
// or a broken '%' escape), which would make DELETE of key "a;b" or "50%"
// reset the bucket of the empty key (every client that sent no API key)
// and GET show that bucket as if asked. Both answer 400 instead.
func TestMalformedQueryIs400(t *testing.T) {
	src, store := newSource(t)
	src.token = testToken
	h := Handler(metrics.New(), src)
	for _, target := range []string{
		"/v1/limits?policy=api-per-key&key=a;b",
		"/v1/limits?policy=api-per-key&key=50%",
		"/v1/limits?policy=api-per-key&key=%zz",
	} {
		decide(t, store, apiPerKey, "", 3) // the shared bucket of clients without a key
		rec := get(t, h, "GET", target)
		if rec.Code != 400 {
			t.Errorf("GET %s: got %d %s, want 400 (the key parameter did not parse)", target, rec.Code, rec.Body)
		}
		rec = del(t, h, target, "Bearer "+testToken)
		if rec.Code != 400 {
			t.Errorf("DELETE %s: got %d, want 400", target, rec.Code)
		}
		if d, _ := store.Peek(context.Background(), time.Now(), ratelimit.Request{Policy: apiPerKey, Key: ""}); d.Remaining == 100 {
			t.Errorf("DELETE %s reset the empty key's bucket (remaining %d)", target, d.Remaining)
		}
		store.Reset(context.Background(), ratelimit.Request{Policy: apiPerKey, Key: ""})
	}
}

// TestRepeatedQueryParametersAre400: policy=a&policy=b or key=x&key=y is
// ambiguous, as a key source given twice is to the gateway (SPEC §4): 400,
// never the first value.
func TestRepeatedQueryParametersAre400(t *testing.T) {
	src, store := newSource(t)
	src.token = testToken
	h := Handler(metrics.New(), src)
	decide(t, store, apiPerKey, "abc", 3)
	for _, target := range []string{
		"/v1/limits?policy=api-per-key&key=abc&key=def",
		"/v1/limits?policy=api-per-key&policy=otp-per-phone&key=abc",
	} {
		if rec := get(t, h, "GET", target); rec.Code != 400 {
			t.Errorf("GET %s: got %d %s, want 400 for an ambiguous parameter", target, rec.Code, rec.Body)
		}
		if rec := del(t, h, target, "Bearer "+testToken); rec.Code != 400 {
			t.Errorf("DELETE %s: got %d, want 400 for an ambiguous parameter", target, rec.Code)
		}
	}
}
