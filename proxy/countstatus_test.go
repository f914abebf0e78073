package proxy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestBrokenBodyAfterGuessKeepsUnit: count_status bounds the guesses that
// reach the backend. A client that sends its whole guess, waits until the
// backend has it (a handler decoding JSON returns at the object's end,
// before the body's), and then breaks its own body framing gets sluice's
// 400, which count_status does not list. The unit must stay spent, as for
// a client that went away: given back, every guess would be free.
func TestBrokenBodyAfterGuessKeepsUnit(t *testing.T) {
	t.Parallel()
	var checked atomic.Int64
	got := make(chan struct{}, 1)
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var v struct{ Username, Password string }
		if err := json.NewDecoder(r.Body).Decode(&v); err != nil {
			http.Error(w, "bad json", http.StatusBadRequest)
			return
		}
		checked.Add(1)
		got <- struct{}{}
		select { // the password check
		case <-release:
		case <-time.After(5 * time.Second):
		}
		w.WriteHeader(http.StatusUnauthorized)
	}))
	t.Cleanup(up.Close)
	t.Cleanup(func() { close(release) })
	srv := loginGateway(t, up.URL)
	guess := `{"username":"alice","password":"guess"}`
	first := fmt.Sprintf("%x\r\n%s\r\n", len(guess), guess)
	send := func(tail string, backend bool) int {
		t.Helper()
		return postChunked(t, srv, first, func() {
			if backend {
				<-got // the backend has the guess
			}
		}, tail)
	}
	// Two guesses, each body broken once the backend has it.
	for i := range 2 {
		if code := send("zz\r\n", true); code != http.StatusBadRequest {
			t.Fatalf("guess %d with a broken chunk: got %d, want 400", i+1, code)
		}
	}
	// A well-formed third finds the budget spent.
	if code := send("0\r\n\r\n", false); code != http.StatusTooManyRequests {
		t.Errorf("third guess after two broken bodies: got %d, want 429 (limit 2, the broken ones kept their units); the backend checked %d", code, checked.Load())
	}
}

// TestBrokenBodyBeforeGuessGivesBack: SPEC (count_status): "When the
// status the client receives is not in the list, the unit is given back".
// A chunked body whose first chunk line is malformed gets sluice's 400
// with not a byte of body handed on: no guess reached the backend, so the
// unit goes back, and two such requests under limit 2 leave the owner's
// next, complete login through.
func TestBrokenBodyBeforeGuessGivesBack(t *testing.T) {
	t.Parallel()
	var guesses atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil || len(b) == 0 {
			return // no guess came
		}
		guesses.Add(1)
		w.WriteHeader(http.StatusOK) // the right password: not counted
	}))
	t.Cleanup(up.Close)
	srv := loginGateway(t, up.URL)
	send := func(body string) int { return postChunked(t, srv, body, nil, "") }
	for i := range 2 {
		if code := send("zz\r\n"); code != http.StatusBadRequest {
			t.Fatalf("malformed first chunk %d: got %d, want 400", i+1, code)
		}
	}
	if n := guesses.Load(); n != 0 {
		t.Fatalf("the upstream had %d guesses from the broken bodies; the test needs 0", n)
	}
	guess := `{"username":"alice","password":"correct"}`
	if code := send("29\r\n" + guess + "\r\n0\r\n\r\n"); code != http.StatusOK {
		t.Errorf("complete login after two 400s whose bodies never reached the backend: got %d, want 200 (400 is not in count_status, no guess was forwarded)", code)
	}
}

// loginGateway is a gateway with one login route under a count_status
// limit of 2 guesses an hour per client.
func loginGateway(t *testing.T, upstream string) *httptest.Server {
	t.Helper()
	srv, _ := newTestGateway(t, `
routes:
  - name: login
    match: {path: /v1/login}
    upstream: %s
    limits:
      - {algorithm: sliding_window_log, limit: 2, window: 1h, key: [ip], count_status: [401, 403]}
`, upstream)
	return srv
}

// postChunked sends a chunked JSON login to srv as raw bytes: first, then
// (after between, when given) tail, and returns the answer's status.
func postChunked(t *testing.T, srv *httptest.Server, first string, between func(), tail string) int {
	t.Helper()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "POST /v1/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"+first)
	if between != nil {
		between()
	}
	io.WriteString(c, tail)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
