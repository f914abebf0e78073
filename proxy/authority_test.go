package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestHTTP2AuthorityBytes: over HTTP/2 net/http's server does not check
// :authority as it checks an HTTP/1 Host field, so a client could send
// "acme.example.com ." and be keyed as "acme.example.com " while every
// later parser trims the space: one bucket per count of spaces, all for
// the same upstream host. Such an authority answers 400 and reaches
// nothing; the spellings that do name the host share its bucket.
func TestHTTP2AuthorityBytes(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	hosts := []string{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hosts = append(hosts, r.Header.Get("X-Forwarded-Host"))
		mu.Unlock()
	}))
	t.Cleanup(up.Close)
	srv := newTLSGateway(t, fmt.Sprintf(`
routes:
  - name: hosted
    upstream: %s
    limits:
      - {algorithm: fixed_window, limit: 2, window: 1h, key: [header:Host]}
`, up.URL))

	for _, tc := range []struct {
		authority string
		status    int
	}{
		{"acme.example.com ", 400},
		{"acme.example.com .", 400},
		{"acme.example.com\t:443", 400},
		{"acme.example.com\u00a0", 400},
		{"acme.example.com/admin", 400},
		{"acme.example.com", 200},
		{"ACME.example.com.", 200},
		{"acme.example.com:443", 429},
	} {
		if got := h2Status(t, srv.Listener.Addr().String(), tc.authority); got != tc.status {
			t.Errorf(":authority %q: got %d, want %d", tc.authority, got, tc.status)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(hosts) != "[acme.example.com acme.example.com]" {
		t.Errorf("upstream got X-Forwarded-Host %q, want acme.example.com twice", hosts)
	}
}

// h2Status sends GET / with the given :authority over a new HTTP/2
// connection, framed by hand since http2's client refuses such an
// authority, and returns the answer's status.
func h2Status(t *testing.T, addr, authority string) int {
	t.Helper()
	return h2Send(t, addr, [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", authority}, {":path", "/"}})
}

// h2Send sends a request of the given fields, pseudo-fields first, over a
// new HTTP/2 connection and returns the answer's status.
func h2Send(t *testing.T, addr string, fields [][2]string) int {
	t.Helper()
	return h2SendBody(t, addr, fields, "")
}

// h2SendBody is h2Send with a body, sent as one DATA frame that ends the
// stream, with no content-length field unless fields has one.
func h2SendBody(t *testing.T, addr string, fields [][2]string, body string) int {
	t.Helper()
	a := h2Do(t, addr, h2Stream{fields: fields, body: body})
	if a.wasRST {
		t.Fatalf("%q: stream reset: %v", fields, a.reset)
	}
	return a.status
}

// TestHTTP2FieldValuesTrimmed: net/http's HTTP/2 server keeps the spaces
// and tabs around a field value, and the request line's rules do not hold
// for :path. Every value is keyed and matched as the upstream gets it,
// trimmed (Header.Write trims on the way out), so " victim" and "victim\t"
// are victim's bucket; a query with a space or a "#" reaches the upstream
// re-encoded, as the key read it.
func TestHTTP2FieldValuesTrimmed(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []string // key and query at the upstream
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("X-Api-Key")+" "+r.URL.RawQuery)
		mu.Unlock()
	}))
	t.Cleanup(up.Close)
	srv := newTLSGateway(t, fmt.Sprintf(`
routes:
  - name: v2
    match: {path: /v2, headers: {X-Api-Version: "2"}}
    upstream: %[1]s
    limits:
      - {algorithm: fixed_window, limit: 1, window: 1h, key: [global]}
  - name: keyed
    match: {path: /keyed}
    upstream: %[1]s
    limits:
      - {algorithm: fixed_window, limit: 2, window: 1h, key: [header:X-API-Key, query:q]}
  - name: all
    upstream: %[1]s
`, up.URL))
	addr := srv.Listener.Addr().String()
	req := func(path string, fields ...string) [][2]string {
		f := [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "acme.example.com"}, {":path", path}}
		for i := 0; i < len(fields); i += 2 {
			f = append(f, [2]string{fields[i], fields[i+1]})
		}
		return f
	}
	var statuses []int
	for _, v := range []string{"victim", " victim", "victim ", "\tvictim", "victim\t", "  victim \t"} {
		statuses = append(statuses, h2Send(t, addr, req("/keyed", "x-api-key", v)))
	}
	if fmt.Sprint(statuses) != "[200 200 429 429 429 429]" {
		t.Errorf("x-api-key victim with spaces and tabs around: got %v, want [200 200 429 429 429 429]", statuses)
	}
	statuses = nil
	for _, v := range []string{"2", " 2", "2\t"} {
		statuses = append(statuses, h2Send(t, addr, req("/v2", "x-api-version", v)))
	}
	if fmt.Sprint(statuses) != "[200 429 429]" {
		t.Errorf("x-api-version 2 with spaces and tabs around: got %v, want [200 429 429] (the limited route each time)", statuses)
	}
	statuses = nil
	for _, p := range []string{"/keyed?q=p2 x", "/keyed?q=p2+x", "/keyed?q=p2#0", "/keyed?q=p2%230"} {
		statuses = append(statuses, h2Send(t, addr, req(p)))
	}
	if fmt.Sprint(statuses) != "[200 200 200 200]" {
		t.Errorf("queries with a space and a #: got %v, want 200 each", statuses)
	}
	mu.Lock()
	defer mu.Unlock()
	if g := fmt.Sprintf("%q", got); g != `["victim " "victim " " " " q=p2+x" " q=p2+x" " q=p2%230" " q=p2%230"]` {
		t.Errorf("upstream got %s", g)
	}
}

// TestConnectIsRefused: sluice forwards no CONNECT. Over HTTP/2 the body
// of one has no length, and Go's HTTP/1 transport writes a CONNECT body of
// unknown length as it is, neither chunked nor with a Content-Length: an
// upstream reads "CONNECT / HTTP/1.1" as a request without a body and the
// body as the requests that follow, which no route matched and no limit
// counted. Here those are three POST /v1/otp past a limit of one. Over
// HTTP/1.1 the method is refused all the same: an upstream that speaks
// CONNECT could make its connection a tunnel.
func TestConnectIsRefused(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.Path)
		mu.Unlock()
	}))
	t.Cleanup(up.Close)
	srv := newTLSGateway(t, fmt.Sprintf(`
routes:
  - name: otp
    match: {path: /v1/otp, methods: [POST]}
    upstream: %[1]s
    limits:
      - {algorithm: fixed_window, limit: 1, window: 1h, key: [global]}
  - name: rest
    upstream: %[1]s
`, up.URL))
	addr := srv.Listener.Addr().String()

	otp := func() string {
		return "POST /v1/otp HTTP/1.1\r\nHost: up\r\nContent-Length: 2\r\n\r\n{}"
	}
	if s := h2SendBody(t, addr, [][2]string{{":method", "POST"}, {":scheme", "https"}, {":authority", "acme.example.com"}, {":path", "/v1/otp"}}, "{}"); s != 200 {
		t.Fatalf("first POST /v1/otp: got %d, want 200", s)
	}
	if s := h2SendBody(t, addr, [][2]string{{":method", "CONNECT"}, {":authority", "acme.example.com:443"}}, otp()+otp()+otp()); s != http.StatusNotImplemented {
		t.Errorf("CONNECT over HTTP/2: got %d, want 501", s)
	}
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT acme.example.com:443 HTTP/1.1\r\nHost: acme.example.com:443\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: "CONNECT"})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotImplemented || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("CONNECT over HTTP/1.1: got %d %s, want 501 problem+json", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	time.Sleep(100 * time.Millisecond) // what the upstream would read after an unframed body
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(got) != "[POST /v1/otp]" {
		t.Errorf("upstream got %q, want the one POST /v1/otp", got)
	}
}

// sendTimeoutGateway is a TLS gateway with HTTP/2 and send_timeout 300ms
// in front of up.
func sendTimeoutGateway(t *testing.T, up string) *httptest.Server {
	t.Helper()
	return newTLSGateway(t, fmt.Sprintf("send_timeout: 300ms\nroutes:\n  - name: all\n    upstream: %s\n", up))
}

// newTLSGateway serves a gateway of the configuration yaml over TLS, with
// HTTP/2, on a real listener, with the memory store.
func newTLSGateway(t *testing.T, yaml string) *httptest.Server {
	t.Helper()
	return newTLSGatewayVia(t, yaml, nil)
}

// TestHTTP2StreamThatNeverOpensItsWindow: an HTTP/2 client that sets its
// initial window to 0 and never opens it takes none of an answer; its
// stream is reset once send_timeout passes, which lets the handler, its
// goroutines and the upstream's connection go. Without the bound each
// such stream held them as long as the client kept the connection.
func TestHTTP2StreamThatNeverOpensItsWindow(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("hello"))
	}))
	t.Cleanup(up.Close)
	srv := sendTimeoutGateway(t, up.URL)
	_, fr := h2Open(t, srv.Listener.Addr().String(), 10*time.Second, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "acme.example.com"}, {":path", "/"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true})
	began := time.Now()
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("no reset of the stream after %v: %v", time.Since(began).Round(time.Millisecond), err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.DataFrame:
			t.Fatalf("got %d bytes of data through a window of 0", len(f.Data()))
		case *http2.RSTStreamFrame:
			t.Logf("stream reset after %v: %v", time.Since(began).Round(time.Millisecond), f.ErrCode)
			return
		}
	}
}

// TestHTTP2QuietStreamOutlivesSendTimeout: send_timeout bounds each write,
// not the quiet between them: an event stream that sends nothing for
// longer than it still reaches the HTTP/2 client whole.
func TestHTTP2QuietStreamOutlivesSendTimeout(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			if i > 0 {
				time.Sleep(700 * time.Millisecond)
			}
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(up.Close)
	srv := sendTimeoutGateway(t, up.URL)
	resp, err := srv.Client().Get(srv.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Fatalf("got %s, want HTTP/2", resp.Proto)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil || string(body) != "data: 0\n\ndata: 1\n\ndata: 2\n\n" {
		t.Errorf("got %q, %v; want the three events", body, err)
	}
}

// TestHTTP2PausesOutliveSendTimeout: over HTTP/2 a stream whose deadline
// passes is reset even with nothing to write, so the deadline must hold
// only while a write is under way: an upstream that sends 103 Early Hints
// and answers later than send_timeout, or pauses inside a body of known
// length, gets its whole answer to a client that reads everything.
func TestHTTP2PausesOutliveSendTimeout(t *testing.T) {
	t.Parallel()
	for name, h := range map[string]http.HandlerFunc{
		"103 then a slow answer": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Link", "</a.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			time.Sleep(700 * time.Millisecond)
			w.Write([]byte("0123456789"))
		},
		"a pause inside a known length": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "10")
			w.Write([]byte("01234"))
			w.(http.Flusher).Flush()
			time.Sleep(700 * time.Millisecond)
			w.Write([]byte("56789"))
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			up := httptest.NewServer(h)
			t.Cleanup(up.Close)
			srv := sendTimeoutGateway(t, up.URL)
			resp, err := srv.Client().Get(srv.URL + "/")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if resp.ProtoMajor != 2 || err != nil || string(body) != "0123456789" {
				t.Errorf("%s: got %q, %v; want the whole answer", resp.Proto, body, err)
			}
		})
	}
}

// TestHTTP1StreamEndsAfterQuiet: net/http writes the end of a chunked
// answer after the handler returns; an upstream that ends its stream after
// a quiet longer than send_timeout must not find the deadline of the last
// write passed then.
func TestHTTP1StreamEndsAfterQuiet(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: 0\n\n")
		w.(http.Flusher).Flush()
		time.Sleep(700 * time.Millisecond)
	}))
	t.Cleanup(up.Close)
	srv := httptest.NewServer(sendTimeoutGateway(t, up.URL).Config.Handler)
	t.Cleanup(srv.Close)
	resp, err := testClient.Get(srv.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || string(body) != "data: 0\n\n" {
		t.Errorf("got %q, %v; want the event and the end of the stream", body, err)
	}
}

// TestHeadSharesGetBudget: a HEAD takes a GET route, and a key with the
// method source puts it in the GET's bucket, so alternating the two
// methods does not double a budget.
func TestHeadSharesGetBudget(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(up.Close)
	srv := newTLSGateway(t, fmt.Sprintf(`
routes:
  - name: verify
    match: {path: /v1/verify, methods: [GET]}
    upstream: %[1]s
    limits:
      - {algorithm: fixed_window, limit: 1, window: 1h, key: [ip, method, path]}
  - name: rest
    upstream: %[1]s
`, up.URL))
	var got []int
	for _, m := range []string{"GET", "GET", "HEAD", "HEAD"} {
		req, _ := http.NewRequest(m, srv.URL+"/v1/verify?code=1", nil)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		got = append(got, resp.StatusCode)
	}
	if fmt.Sprint(got) != "[200 429 429 429]" {
		t.Errorf("GET, GET, HEAD, HEAD: got %v, want [200 429 429 429]", got)
	}
}
