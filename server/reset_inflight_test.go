package server

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestResetWithCountStatusInFlight: README "DELETE /v1/limits": "A
// count_status request admitted before the reset and answered after it
// gives nothing back to the fresh bucket, which never counted it", and a
// unit it holds is not taken from the fresh bucket either. A request is
// held at the upstream while support resets its bucket; one more request
// is admitted and counted (401) by the fresh bucket; then the held one is
// answered, counted (Keep) or not (Refund). The fresh bucket, limit 2,
// must then admit exactly one more request: two would be a unit given
// to it, none a unit taken from it.
func TestResetWithCountStatusInFlight(t *testing.T) {
	stores := []struct{ name, store, sync string }{
		{"memory", "memory", ""},
		{"redis", "", ""},
		{"redis lease", "", "\n    sync: lease"},
	}
	for _, st := range stores {
		for _, alg := range []string{"token_bucket", "fixed_window", "sliding_window_counter"} {
			for _, status := range []int{http.StatusUnauthorized, http.StatusOK} {
				t.Run(fmt.Sprintf("%s/%s/%d", st.name, alg, status), func(t *testing.T) {
					store := st.store
					if store == "" {
						rs := redistest.Start(t)
						store = fmt.Sprintf("redis\n  redis: {addresses: [%q], timeout: 2s}", rs.Addr())
					}
					resetWithCountStatusInFlight(t, store, st.sync, alg, status)
				})
			}
		}
	}
}

func resetWithCountStatusInFlight(t *testing.T, store, sync, alg string, status int) {
	// The fixed and sliding windows are an hour long: a boundary
	// crossed during the test would start the budget over.
	if left := time.Until(time.Now().Truncate(time.Hour).Add(time.Hour)); left < 30*time.Second {
		time.Sleep(left + time.Second)
	}
	arrived := make(chan struct{}, 1)
	release := make(chan int, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/held" {
			arrived <- struct{}{}
			select {
			case s := <-release:
				w.WriteHeader(s)
			case <-r.Context().Done():
			}
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
	}))
	t.Cleanup(up.Close)
	r := serve(t, fmt.Sprintf(`listen: 127.0.0.1:0
admin: 127.0.0.1:0
admin_token: tok
store:
  type: %s
policies:
  logins:
    algorithm: %s
    limit: 2
    window: 1h
    key: [ip]
    count_status: [401]%s
routes:
  - name: login
    upstream: %s
    limits: [logins]
`, store, alg, sync, up.URL))
	send := func(path string) int {
		t.Helper()
		resp, err := client.Get(r.url("http") + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	held := make(chan int, 1)
	go func() {
		resp, err := client.Get(r.url("http") + "/held")
		if err != nil {
			held <- 0
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		held <- resp.StatusCode
	}()
	select {
	case <-arrived:
	case <-time.After(5 * time.Second):
		t.Fatal("the held request did not reach the upstream within 5s")
	}
	req, _ := http.NewRequest(http.MethodDelete, r.url("admin")+"/v1/limits?policy=logins&key=127.0.0.1", nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE /v1/limits: got %d, want 204", resp.StatusCode)
	}
	if got := send("/after"); got != http.StatusUnauthorized {
		t.Fatalf("first request after the reset: got %d, want 401 (admitted, counted)", got)
	}
	release <- status
	if got := <-held; got != status {
		t.Fatalf("held request: got %d, want %d", got, status)
	}
	admitted := 0
	for i := range 4 {
		got := send("/more")
		if got == http.StatusTooManyRequests {
			break
		}
		if got != http.StatusUnauthorized {
			t.Fatalf("request %d: got %d, want 401 or 429", i, got)
		}
		admitted++
	}
	if admitted != 1 {
		t.Errorf("after the held request was answered %d: the fresh bucket admitted %d more, want 1 (limit 2, one counted since the reset)", status, admitted)
	}
}
