package proxy

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// TestRefusedRetryTakesTargetPath: upstreams may carry a base path. A
// request whose target refuses the connection moves to the next target
// and reaches it at that target's base path, as the requests the round
// robin sends there directly do.
func TestRefusedRetryTakesTargetPath(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + ln.Addr().String() + "/a"
	ln.Close()
	var mu sync.Mutex
	var paths []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.RequestURI())
		mu.Unlock()
	}))
	defer up.Close()
	srv, _ := newTestGateway(t, "routes:\n  - name: rr\n    strip_prefix: /v1\n    upstreams: ["+refused+", %s/b]\n", up.URL)
	for i := 0; i < 2; i++ {
		resp, err := testClient.Get(srv.URL + "/v1/x%2Fy?q=1")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: got status %d, want 200", i, resp.StatusCode)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(paths) != 2 {
		t.Fatalf("the second upstream got %d requests, want 2", len(paths))
	}
	for i, p := range paths {
		if p != "/b/x%2Fy?q=1" {
			t.Errorf("request %d reached the second upstream as %q, want %q (its base path /b)", i, p, "/b/x%2Fy?q=1")
		}
	}
}
